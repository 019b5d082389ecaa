#include "mcp_config.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <toml++/toml.h>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/llm.hpp"
#include "terminal.hpp"

namespace parley::cli {
namespace {

constexpr const char* kKeys =
    "command, env, cwd, url, bearer_token_env, headers, allow, deny, approve, timeout_ms, prefix, "
    "oauth, oauth_client_id, oauth_client_secret_env, oauth_scopes, oauth_redirect_port, protocol";

constexpr std::chrono::minutes kSignInWait{5};  // a person signing in with a browser

// $XDG_STATE_HOME/parley/mcp_tokens.json, else ~/.local/state/parley/mcp_tokens.json.
std::string tokenFile() {
  const char* state = std::getenv("XDG_STATE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir =
      state && *state ? std::filesystem::path(state) / "parley"
                      : std::filesystem::path(home && *home ? home : ".") / ".local/state/parley";
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  return (dir / "mcp_tokens.json").string();
}

toml::table parseFile(const std::string& file) {
  if (!std::filesystem::exists(file))
    throw ValidationError(
        "--mcp", "no config file at " + file + " (give one with --config or PARLEY_CONFIG)");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ValidationError(file, "cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return toml::parse(text.str(), std::string_view(file));
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw ValidationError(
        file + ":" + std::to_string(where.line) + ":" + std::to_string(where.column),
        std::string(e.description()));
  }
}

std::vector<std::string> strings(const toml::node& node, const std::string& field, bool nonEmpty) {
  const toml::array* array = node.as_array();
  if (!array) throw ValidationError(field, "must be an array of strings");
  std::vector<std::string> out;
  for (const auto& item : *array) {
    auto text = item.value<std::string>();
    if (!text) throw ValidationError(field, "every element must be a string");
    out.push_back(*text);
  }
  if (nonEmpty && out.empty()) throw ValidationError(field, "must not be empty");
  return out;
}

std::map<std::string, std::string> stringTable(const toml::node& node, const std::string& field) {
  const toml::table* table = node.as_table();
  if (!table) throw ValidationError(field, "must be a table of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : *table) {
    auto text = value.value<std::string>();
    if (!text) throw ValidationError(field + "." + std::string(key.str()), "must be a string");
    out[std::string(key.str())] = *text;
  }
  return out;
}

// A string value, else ValidationError naming the key.
std::string stringValue(const toml::node& node, const std::string& field) {
  auto text = node.value<std::string>();
  if (!text) throw ValidationError(field, "must be a string");
  return *text;
}

// `bearer_token_env`: the token held by the variable the value names.
std::string tokenFromEnvironment(const toml::node& node, const std::string& field) {
  auto variable = node.value<std::string>();
  if (!variable) throw ValidationError(field, "must be a string (a variable's name)");
  const char* token = std::getenv(variable->c_str());
  if (!token || !*token)
    throw ValidationError(field, "the environment variable " + *variable + " is not set");
  return token;
}

}  // namespace

McpServerOptions readMcpServer(const std::string& file, const std::string& name) {
  toml::table root = parseFile(file);
  const std::string where = file + ": mcp." + name;
  const toml::table* servers = root["mcp"].as_table();
  const toml::table* table = servers ? (*servers)[name].as_table() : nullptr;
  if (!table) {
    std::string known;
    if (servers) {
      for (const auto& [key, value] : *servers)
        known += (known.empty() ? "" : ", ") + std::string(key.str());
    }
    throw ValidationError("mcp." + name, "no [mcp." + name + "] table in " + file +
                                             (known.empty() ? "" : " (it has: " + known + ")"));
  }
  McpServerOptions options;
  options.name = name;
  bool oauth = false;
  for (const auto& [key, node] : *table) {
    const std::string k(key.str());
    const std::string field = where + "." + k;
    if (k == "command") {
      options.command = strings(node, field, true);
    } else if (k == "env") {
      options.env = stringTable(node, field);
    } else if (k == "cwd") {
      options.cwd = stringValue(node, field);
    } else if (k == "url") {
      options.url = stringValue(node, field);
    } else if (k == "bearer_token_env") {
      options.bearerToken = tokenFromEnvironment(node, field);
    } else if (k == "headers") {
      options.headers = stringTable(node, field);
    } else if (k == "allow") {
      options.allow = strings(node, field, false);
    } else if (k == "deny") {
      options.deny = strings(node, field, false);
    } else if (k == "approve") {
      if (auto text = node.value<std::string>()) {
        if (*text == "always")
          options.approval = McpApproval::Always;
        else if (*text == "never")
          options.approval = McpApproval::Never;
        else if (*text == "destructive")
          options.approval = McpApproval::Destructive;
        else
          throw ValidationError(field,
                                "must be \"always\", \"never\", \"destructive\" or a list of "
                                "tool names");
      } else {
        options.approval = McpApproval::Listed;
        options.approveTools = strings(node, field, false);
      }
    } else if (k == "timeout_ms") {
      auto ms = node.value<int64_t>();
      if (!ms || *ms <= 0) throw ValidationError(field, "must be a positive integer");
      options.toolTimeout = std::chrono::milliseconds(*ms);
    } else if (k == "oauth") {
      auto flag = node.value<bool>();
      if (!flag) throw ValidationError(field, "must be true or false");
      oauth = *flag;
    } else if (k == "oauth_client_id") {
      auto text = node.value<std::string>();
      if (!text || text->empty()) throw ValidationError(field, "must be a non-empty string");
      options.oauth.clientId = *text;
    } else if (k == "oauth_client_secret_env") {
      auto variable = node.value<std::string>();
      if (!variable) throw ValidationError(field, "must be a string (a variable's name)");
      const char* secret = std::getenv(variable->c_str());
      if (!secret || !*secret)
        throw ValidationError(field, "the environment variable " + *variable + " is not set");
      options.oauth.clientSecret = secret;
    } else if (k == "oauth_scopes") {
      options.oauth.scopes = strings(node, field, false);
    } else if (k == "oauth_redirect_port") {
      auto port = node.value<int64_t>();
      if (!port || *port < 1 || *port > 65535)
        throw ValidationError(field, "must be a port number (1-65535)");
      options.oauth.redirectUri = "http://127.0.0.1:" + std::to_string(*port) + "/callback";
    } else if (k == "protocol") {
      auto text = node.value<std::string>();
      if (!text) throw ValidationError(field, "must be a string (\"auto\" or a revision)");
      options.protocol = *text;  // McpClient checks it against the revisions parley speaks
    } else if (k == "prefix") {
      auto flag = node.value<bool>();
      if (!flag) throw ValidationError(field, "must be true or false");
      options.prefixToolNames = *flag;
    } else {
      throw ValidationError(field, std::string("unknown key (") + kKeys + ")");
    }
  }
  if (options.command.empty() == options.url.empty())
    throw ValidationError(where, "give exactly one of command (a program to start) and url");
  if (!options.url.empty() && options.url.rfind("http://", 0) != 0 &&
      options.url.rfind("https://", 0) != 0)
    throw ValidationError(where + ".url", "must start with http:// or https://");
  if (!options.command.empty() &&
      (!options.url.empty() || !options.headers.empty() || !options.bearerToken.empty()))
    throw ValidationError(where, "headers and bearer_token_env go with url, not command");
  if (!options.url.empty() && (!options.env.empty() || !options.cwd.empty()))
    throw ValidationError(where, "env and cwd go with command, not url");
  if (oauth) {
    if (options.url.empty()) throw ValidationError(where + ".oauth", "goes with url, not command");
    // A browser sign-in: the URL is printed, the browser comes back to a loopback port.
    const std::string server = name;
    options.oauth.authorize = [server](const McpAuthorizationRequest& request,
                                       std::stop_token cancel) {
      return mcpAwaitBrowserSignIn(
          request,
          [&](const std::string& url) {
            std::cerr << "parley: mcp." << server << " needs a sign-in; open this in a browser:\n  "
                      << url << "\n"
                      << std::flush;
          },
          kSignInWait, std::move(cancel));
    };
    options.oauth.tokenFile = tokenFile();
  }
  return options;
}

void addMcpOption(CLI::App& cmd, std::vector<std::string>& servers) {
  cmd.add_option("--mcp", servers,
                 "Offer the tools of the MCP server of an [mcp.NAME] table of the config file "
                 "(repeatable; see `parley mcp list`)")
      ->allow_extra_args(false);
}

McpElicitationHandler terminalForm(std::istream& in, std::ostream& out, std::mutex& terminal) {
  return [&in, &out, &terminal](const McpElicitation& request, std::stop_token) {
    std::lock_guard lock(terminal);  // one form at a time on the terminal
    McpElicitationAnswer answer;
    out << "\n[mcp." << request.server << " asks] " << request.message << "\n";
    std::string line;
    if (request.mode == "url") {
      out << "  open: " << request.url << "\n  done? [y/N] " << std::flush;
      if (std::getline(in, line) && (line == "y" || line == "yes"))
        answer.action = McpElicitationAnswer::Action::Accept;
      return answer;
    }
    out << "  (empty keeps the default; \"-\" declines)\n";
    for (const auto& [name, property] : request.requestedSchema["properties"].items()) {
      std::string type = property.value("type", "string");
      out << "  " << name;
      if (property.contains("description"))
        out << " (" << preview(property["description"].get<std::string>(), 80) << ")";
      if (auto options = property.find("enum"); options != property.end())
        out << " " << options->dump();
      if (property.contains("default")) out << " [" << property["default"].dump() << "]";
      out << ": " << std::flush;
      if (!std::getline(in, line)) return answer;  // end of input: decline
      if (line == "-") return answer;
      if (line.empty()) continue;
      if (type == "string") {
        answer.content[name] = line;
      } else {
        // Numbers, booleans and lists as JSON; a mistake is caught by the form's check.
        nlohmann::json value = parseJson(line, {}, false);
        answer.content[name] = value.is_discarded() ? nlohmann::json(line) : value;
      }
    }
    answer.action = McpElicitationAnswer::Action::Accept;
    return answer;
  };
}

McpSamplingHandler modelSampling(std::shared_ptr<LlmClient> llm,
                                 std::function<bool(const McpSamplingRequest&)> approve) {
  return [llm = std::move(llm), approve = std::move(approve)](const McpSamplingRequest& request,
                                                              std::stop_token) -> nlohmann::json {
    if (!approve || !approve(request))
      throw CancelledError("mcp." + request.server + ": the sampling request was declined");
    ChatRequest call;
    const nlohmann::json& params = request.params;
    if (auto system = params.find("systemPrompt"); system != params.end() && system->is_string())
      call.messages.push_back(Message::system(system->get<std::string>()));
    for (const nlohmann::json& message : params["messages"]) {
      const nlohmann::json& content = message["content"];
      // Text only: a tool message carries text, and images are not forwarded from a server.
      std::string text = content.is_object() && content.value("type", "") == "text"
                             ? content.value("text", "")
                             : "[" +
                                   (content.is_object() ? content.value("type", "content")
                                                        : std::string("content")) +
                                   " not forwarded]";
      call.messages.push_back(message.value("role", "user") == "assistant"
                                  ? Message::assistant(std::move(text))
                                  : Message::user(std::move(text)));
    }
    call.maxTokens = params.value("maxTokens", 1024);
    if (auto temperature = params.find("temperature");
        temperature != params.end() && temperature->is_number())
      call.temperature = temperature->get<double>();
    ChatResult result = llm->generate(call);
    return {{"role", "assistant"},
            {"content", {{"type", "text"}, {"text", result.message.content}}},
            {"model", result.model},
            {"stopReason", result.finishReason == "length" ? "maxTokens" : "endTurn"}};
  };
}

void addMcpServers(ToolRegistry& registry, const std::vector<std::string>& servers,
                   const std::string& file, std::ostream& notes, std::ostream* progress,
                   const McpElicitationHandler& ask, const McpSamplingHandler& sample,
                   McpAsking asking) {
  for (const std::string& name : servers) {
    McpServerOptions options = readMcpServer(file, name);
    options.onSampling = sample;
    if (ask) {
      options.onElicitation = ask;
    } else {
      // Nobody to ask: decline, and say what was asked.
      options.onElicitation = [&notes, name](const McpElicitation& request, std::stop_token) {
        notes << "parley: note: mcp." << name << " asked \"" << preview(request.message, 200)
              << "\"; this command cannot ask, so it declined (parley chat asks)\n"
              << std::flush;
        return McpElicitationAnswer{};
      };
    }
    if (progress) {
      options.onProgress = [progress](const McpProgress& p) {
        std::ostringstream line;
        line << "[progress] " << p.tool << " " << p.progress;
        if (p.total) line << "/" << *p.total;
        if (!p.message.empty()) line << " " << p.message;
        line << "\n";
        *progress << line.str() << std::flush;
      };
    }
    const bool prompt = asking == McpAsking::Prompt;
    if (prompt && options.approval == McpApproval::Always) {
      throw ValidationError(file + ": mcp." + name + ".approve",
                            "\"always\" needs someone to approve each call, and this command "
                            "cannot ask; use \"never\" or name the tools that need approval");
    }
    if (prompt && options.approval == McpApproval::Listed && !options.approveTools.empty()) {
      std::string names;
      for (const std::string& tool : options.approveTools) {
        options.deny.push_back(tool);
        names += (names.empty() ? "" : ", ") + tool;
      }
      notes << "parley: note: mcp." << name << ": " << names
            << " need approval, which this command cannot ask for; not offered\n";
    }
    McpRegistration added = registry.addMcpServer(name, std::move(options));
    for (const std::string& skipped : added.skipped)
      notes << "parley: note: mcp." << name << ": skipped " << skipped << "\n";
    if (!prompt) continue;
    // "destructive": which tools need approval is known once they are listed.
    std::string held;
    for (const std::string& tool : added.tools) {
      auto info = registry.find(tool);
      if (!info || !info->options.requiresApproval) continue;
      registry.remove(tool);
      held += (held.empty() ? "" : ", ") + tool;
    }
    if (!held.empty())
      notes << "parley: note: mcp." << name << ": " << preview(held, 400)
            << " need approval (approve = \"destructive\": not marked read-only or "
               "non-destructive), which this command cannot ask for; not offered\n";
  }
}

std::string readA2aKeyFile(const std::string& path, const std::string& field) {
  constexpr std::uintmax_t kMaxKeyFileBytes = 64 << 10;  // an RSA 8192 PEM is under 7 KiB
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) throw ValidationError(field, "cannot read the key file " + path);
  if (size > kMaxKeyFileBytes)
    throw ValidationError(field, path + ": " + std::to_string(size) +
                                     " bytes, over 65536 (a PEM "
                                     "key file)");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw ValidationError(field, "cannot read the key file " + path);
  return text.str();
}

A2aAgentOptions readA2aAgent(const std::string& file, const std::string& name) {
  toml::table root = parseFile(file);
  const std::string where = file + ": a2a." + name;
  const toml::table* agents = root["a2a"].as_table();
  const toml::table* table = agents ? (*agents)[name].as_table() : nullptr;
  if (!table) throw ValidationError("a2a." + name, "no [a2a." + name + "] table in " + file);
  A2aAgentOptions options;
  for (const auto& [key, node] : *table) {
    const std::string k(key.str());
    const std::string field = where + "." + k;
    if (k == "url") {
      options.url = stringValue(node, field);
    } else if (k == "bearer_token_env") {
      options.bearerToken = tokenFromEnvironment(node, field);
    } else if (k == "headers") {
      for (auto& [header, value] : stringTable(node, field))
        options.headers.emplace_back(header, value);
    } else if (k == "timeout_ms") {
      auto ms = node.value<int64_t>();
      if (!ms || *ms < 1 || *ms > 86'400'000)
        throw ValidationError(field, "must be 1 to 86400000 milliseconds");
      options.taskTimeout = std::chrono::milliseconds(*ms);
    } else if (k == "card_public_key") {
      // A relative path is the config file's neighbour.
      std::filesystem::path path(stringValue(node, field));
      if (path.is_relative()) path = std::filesystem::path(file).parent_path() / path;
      options.cardPublicKey = readA2aKeyFile(path.string(), field);
      try {
        a2aKeyThumbprint(options.cardPublicKey);  // refused now rather than at the first card
      } catch (const ValidationError& e) {
        throw ValidationError(field, path.string() + ": " + e.what());
      }
    } else {
      throw ValidationError(
          field, "unknown key (url, bearer_token_env, headers, timeout_ms, card_public_key)");
    }
  }
  if (options.url.empty()) throw ValidationError(where + ".url", "is required");
  return options;
}

void addA2aOption(CLI::App& cmd, std::vector<std::string>& agents) {
  cmd.add_option("--a2a", agents,
                 "Offer the remote A2A agent of an [a2a.NAME] table of the config file as the "
                 "tool NAME (repeatable)")
      ->allow_extra_args(false);
}

void addA2aAgents(ToolRegistry& registry, const std::vector<std::string>& agents,
                  const std::string& file) {
  for (const std::string& name : agents)
    addA2aAgent(registry, name, readA2aAgent(file, name));
}

}  // namespace parley::cli
