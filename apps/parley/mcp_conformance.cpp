// `parley mcp conformance-client URL`: the client under test of the official MCP conformance
// suite (npm @modelcontextprotocol/conformance, `conformance client --command ...`). The suite
// starts a test server for one scenario, runs this command with the server's URL appended, the
// scenario's name in MCP_CONFORMANCE_SCENARIO and, for some scenarios, a JSON object in
// MCP_CONFORMANCE_CONTEXT (pre-registered OAuth credentials); then it judges what the server saw.
//
// The command drives the library's own McpClient: it connects (the handshake, and an OAuth
// sign-in when the server asks for one), lists the tools and calls each usable one once with
// arguments made from its input schema (or makes the calls the context's `toolCalls` lists),
// answering an elicitation by accepting the schema's defaults. A sign-in follows the authorization
// server's redirect without a browser (the suite's servers approve at once). Every step is printed
// on stdout; the exit status is 0 when every step succeeded. The revision is
// MCP_CONFORMANCE_PROTOCOL_VERSION when the suite gives one (0.2 and later), else 2025-11-25 (0.1
// gives none, and its scenarios expect initialize first).
#include <cstdlib>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "mcp_config.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/mcp.hpp"

namespace parley::cli {
namespace {

constexpr std::size_t kMaxContextBytes = 64 << 10;  // MCP_CONFORMANCE_CONTEXT

// Arguments for a tool from its input schema: each required property (and each property, when
// none is required) gets its default, else a small value of its type.
nlohmann::json argumentsFor(const nlohmann::json& schema) {
  nlohmann::json arguments = nlohmann::json::object();
  if (!schema.is_object()) return arguments;
  auto properties = schema.find("properties");
  if (properties == schema.end() || !properties->is_object()) return arguments;
  int next = 1;
  for (const auto& [name, property] : properties->items()) {
    if (!property.is_object()) continue;
    if (property.contains("default")) {
      arguments[name] = property["default"];
      continue;
    }
    std::string type = property.value("type", "string");
    if (type == "number" || type == "integer")
      arguments[name] = next++;
    else if (type == "boolean")
      arguments[name] = true;
    else if (type == "object")
      arguments[name] = nlohmann::json::object();
    else if (type == "array")
      arguments[name] = nlohmann::json::array();
    else
      arguments[name] = "test";
  }
  return arguments;
}

int runConformanceClient(const std::string& url) {
  const char* scenario = std::getenv("MCP_CONFORMANCE_SCENARIO");
  std::cout << "scenario: " << (scenario ? scenario : "(none)") << "\n";
  nlohmann::json context = nlohmann::json::object();
  if (const char* text = std::getenv("MCP_CONFORMANCE_CONTEXT"); text && *text) {
    if (std::string_view(text).size() > kMaxContextBytes)
      throw ValidationError("MCP_CONFORMANCE_CONTEXT",
                            "is larger than " + std::to_string(kMaxContextBytes) + " bytes");
    context = parseJson(text, {}, false);
    if (!context.is_object())
      throw ValidationError("MCP_CONFORMANCE_CONTEXT", "must be one JSON object");
  }

  McpServerOptions options;
  options.name = "conformance";
  options.url = url;
  options.protocol = "2025-11-25";
  if (const char* version = std::getenv("MCP_CONFORMANCE_PROTOCOL_VERSION"); version && *version)
    options.protocol = version;  // checked by McpClient: a version parley does not speak is refused
  options.requestTimeout = std::chrono::seconds(20);
  options.toolTimeout = std::chrono::seconds(20);
  // A form is accepted as the server proposes it: the library fills in the schema's defaults.
  options.onElicitation = [](const McpElicitation& request, std::stop_token) {
    std::cout << "elicitation (" << request.mode << "): " << request.message << "\n";
    McpElicitationAnswer answer;
    answer.action = McpElicitationAnswer::Action::Accept;
    return answer;
  };
  // The suite's authorization servers approve at once with a redirect: no browser needed.
  options.oauth.authorize = [](const McpAuthorizationRequest& request, std::stop_token) {
    std::cout << "sign-in: following the authorization redirect\n";
    return mcpFollowAuthorizationRedirect(request, std::chrono::seconds(10));
  };
  options.oauth.redirectUri = "http://localhost:3000/callback";
  options.oauth.clientName = "parley conformance client";
  // The client ID metadata document URL the suite expects (auth/basic-cimd).
  options.oauth.clientMetadataUrl = "https://conformance-test.local/client-metadata.json";
  if (auto id = context.find("client_id"); id != context.end() && id->is_string())
    options.oauth.clientId = id->get<std::string>();
  if (auto secret = context.find("client_secret"); secret != context.end() && secret->is_string())
    options.oauth.clientSecret = secret->get<std::string>();
  McpClient client(options);
  McpServerInfo info = client.serverInfo();
  std::cout << "connected: " << info.name << " " << info.version << ", protocol "
            << info.protocolVersion << "\n";
  std::vector<McpTool> tools = client.listTools();
  std::cout << "tools: " << tools.size() << "\n";
  bool failed = false;
  // json-schema-2020-12-preservation: the echo tool gets another tool's inputSchema exactly as
  // listed, so the suite sees what the client kept of it.
  const McpTool* focal = nullptr;
  for (const McpTool& tool : tools)
    if (tool.name == "json_schema_2020_12_tool") focal = &tool;
  // The calls to make: the scenario's own (http-custom-headers gives each argument's value), else
  // one per usable tool with arguments from its schema.
  std::vector<std::pair<std::string, nlohmann::json>> calls;
  if (auto given = context.find("toolCalls"); given != context.end() && given->is_array()) {
    for (const nlohmann::json& call : *given)
      if (call.is_object() && call.contains("name") && call["name"].is_string())
        calls.emplace_back(call["name"].get<std::string>(),
                           call.value("arguments", nlohmann::json::object()));
  } else {
    for (const McpTool& tool : tools) {
      if (!tool.unusable.empty()) {
        std::cout << "skip " << tool.name << ": " << tool.unusable << "\n";
        continue;
      }
      nlohmann::json arguments = argumentsFor(tool.inputSchema);
      if (tool.name == "json_schema_echo" && focal) arguments = {{"schema", focal->inputSchema}};
      calls.emplace_back(tool.name, std::move(arguments));
    }
  }
  for (const auto& [name, arguments] : calls) {
    McpToolResult result;
    try {
      result = client.callTool(name, arguments);
    } catch (const McpError& e) {
      // A scenario whose server lists tools but serves no tools/call (json-schema-ref-no-deref)
      // judges the listing only.
      if (e.code() != -32601) throw;
      std::cout << "call " << name << ": the server has no tools/call\n";
      continue;
    }
    nlohmann::json seen = result.forModel();
    std::cout << "call " << name << " " << arguments.dump() << ": "
              << (result.isError ? "error: " : "")
              << (seen.is_string() ? seen.get<std::string>() : seen.dump()) << "\n";
    failed = failed || result.isError;
  }
  // 2026-07-28 scenarios also judge resources/read and prompts/get (their Mcp-Name header): a
  // stateless server's resources and prompts are read too.
  if (info.stateless && info.capabilities.contains("resources")) {
    for (const nlohmann::json& resource : client.listResources().items) {
      std::string uri = resource.value("uri", "");
      if (uri.empty()) continue;
      client.readResource(uri);
      std::cout << "read " << uri << "\n";
    }
  }
  if (info.stateless && info.capabilities.contains("prompts")) {
    for (const nlohmann::json& prompt : client.listPrompts().items) {
      std::string name = prompt.value("name", "");
      if (name.empty()) continue;
      std::map<std::string, std::string> arguments;
      if (auto wanted = prompt.find("arguments"); wanted != prompt.end() && wanted->is_array())
        for (const nlohmann::json& argument : *wanted)
          if (argument.is_object() && argument.value("required", false))
            arguments[argument.value("name", "")] = "test";
      client.getPrompt(name, arguments);
      std::cout << "prompt " << name << "\n";
    }
  }
  client.close();
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void addMcpConformanceClient(CLI::App& mcp, int& exitCode) {
  auto url = std::make_shared<std::string>();
  CLI::App* cmd =
      mcp.add_subcommand("conformance-client",
                         "The client under test of the MCP conformance suite (scenario from "
                         "MCP_CONFORMANCE_SCENARIO, context from MCP_CONFORMANCE_CONTEXT)");
  cmd->add_option("url", *url, "The scenario's MCP endpoint (the suite appends it)")->required();
  cmd->callback([url, &exitCode] { exitCode = runConformanceClient(*url); });
}

}  // namespace parley::cli
