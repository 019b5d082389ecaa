#include "mcp_config.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <toml++/toml.h>

#include "parley/errors.hpp"

namespace parley::cli {
namespace {

constexpr const char* kKeys =
    "command, env, cwd, url, bearer_token_env, headers, allow, deny, approve, timeout_ms, prefix";

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
  for (const auto& [key, node] : *table) {
    const std::string k(key.str());
    const std::string field = where + "." + k;
    if (k == "command") {
      options.command = strings(node, field, true);
    } else if (k == "env") {
      options.env = stringTable(node, field);
    } else if (k == "cwd") {
      auto text = node.value<std::string>();
      if (!text) throw ValidationError(field, "must be a string");
      options.cwd = *text;
    } else if (k == "url") {
      auto text = node.value<std::string>();
      if (!text) throw ValidationError(field, "must be a string");
      options.url = *text;
    } else if (k == "bearer_token_env") {
      auto variable = node.value<std::string>();
      if (!variable) throw ValidationError(field, "must be a string (a variable's name)");
      const char* token = std::getenv(variable->c_str());
      if (!token || !*token)
        throw ValidationError(field, "the environment variable " + *variable + " is not set");
      options.bearerToken = token;
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
        else
          throw ValidationError(field, "must be \"always\", \"never\" or a list of tool names");
      } else {
        options.approval = McpApproval::Listed;
        options.approveTools = strings(node, field, false);
      }
    } else if (k == "timeout_ms") {
      auto ms = node.value<int64_t>();
      if (!ms || *ms <= 0) throw ValidationError(field, "must be a positive integer");
      options.toolTimeout = std::chrono::milliseconds(*ms);
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
  return options;
}

void addMcpOption(CLI::App& cmd, std::vector<std::string>& servers) {
  cmd.add_option("--mcp", servers,
                 "Offer the tools of the MCP server of an [mcp.NAME] table of the config file "
                 "(repeatable; see `parley mcp list`)")
      ->allow_extra_args(false);
}

void addMcpServers(ToolRegistry& registry, const std::vector<std::string>& servers,
                   const std::string& file, std::ostream& notes, std::ostream* progress) {
  for (const std::string& name : servers) {
    McpServerOptions options = readMcpServer(file, name);
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
    if (options.approval == McpApproval::Always) {
      throw ValidationError(file + ": mcp." + name + ".approve",
                            "\"always\" needs someone to approve each call, and this command "
                            "cannot ask; use \"never\" or name the tools that need approval");
    }
    if (options.approval == McpApproval::Listed && !options.approveTools.empty()) {
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
  }
}

}  // namespace parley::cli
