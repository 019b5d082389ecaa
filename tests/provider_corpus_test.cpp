// The conformance corpus (docs/protocols.md, "Conformance corpus"): responses recorded from the
// real Anthropic, OpenAI, Azure, xAI, DeepSeek, Groq, Mistral, Moonshot, Alibaba, Perplexity and
// Gemini APIs (tests/data/provider_corpus/), each served byte for byte over loopback by the mock's
// `raw` rule, streamed (SSE framed as each provider sends it) or whole, to the library and to
// `parley ask`. Each is checked against tests/data/provider_corpus/expected.json, written from the
// recordings by an independent reader (expected.py): the text, the client and provider-run tool
// calls, the usage, the finish reason, the outcome (reply, refusal, provider error), and the
// assistant turn the next request carries back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

// `parley ask` is PARLEY_CORPUS_CLI when set (to measure another build), else this build's.
inline std::string corpusCli() {
  const char* path = std::getenv("PARLEY_CORPUS_CLI");
  return path && *path ? path : PARLEY_CORPUS_DEFAULT_CLI;
}
#define PARLEY_CLI_PATH corpusCli()
#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/protocol.hpp"
#include "parley/server_tools.hpp"

namespace parley {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kCorpus = PARLEY_CORPUS_DIR;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

Protocol protocolOf(const json& c) {
  const std::string p = c["protocol"];
  return p == "anthropic"   ? Protocol::Anthropic
         : p == "responses" ? Protocol::OpenAiResponses
         : p == "gemini"    ? Protocol::Gemini
                            : Protocol::OpenAiChat;
}

// The bytes the provider sent: the recorded event data framed as its API frames it (Anthropic
// and Responses name each event; Chat Completions sends data lines and ends with [DONE]), or
// the body as recorded.
std::string servedBytes(const json& c) {
  const std::string raw = readFile(kCorpus / c["file"].get<std::string>());
  if (!c["stream"].get<bool>()) return raw;
  std::string out;
  std::istringstream lines(raw);
  std::string line;
  const bool gemini = protocolOf(c) == Protocol::Gemini;
  const bool named = protocolOf(c) != Protocol::OpenAiChat && !gemini;
  // A file of several steps' streams: `segment` picks one (each starts with response.created).
  const int wanted = c.value("segment", 0);
  int segment = -1;
  while (std::getline(lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string type = json::parse(line).value("type", std::string());
    if (segment < 0 || (c.contains("segment") && type == "response.created")) ++segment;
    if (segment != wanted) continue;
    if (named) out += "event: " + type + "\n";
    // Gemini frames each chunk as a data line ended by CRLFs, and sends no [DONE].
    out += "data: " + line + (gemini ? "\r\n\r\n" : "\n\n");
  }
  if (!named && !gemini) out += "data: [DONE]\n\n";
  return out;
}

// The recording, then a plain reply to the next request (which is recorded, whatever the mock
// makes of it).
std::unique_ptr<mock::MockServer> serve(const json& c) {
  const bool error = c["outcome"] == "error" && !c["stream"].get<bool>();
  json first = {
      {"times", 1},
      {"raw", servedBytes(c)},
      {"content_type", c["stream"].get<bool>() ? "text/event-stream" : "application/json"}};
  if (error) first["status"] = 400;
  mock::MockOptions options;
  options.script = mock::readScript(first.dump() + "\n" + R"({"reply": {"content": "fine"}})");
  auto server = std::make_unique<mock::MockServer>(options);
  server->start();
  return server;
}

json parsedArguments(const std::string& text) {
  json value = json::parse(text, nullptr, false);
  return value.is_discarded() ? json(text) : value;
}

// Differences between the reply and the expectation, one line each; empty when it conforms.
std::vector<std::string> checkReply(const json& c, const ChatResult& r) {
  std::vector<std::string> bad;
  auto expectEq = [&](const std::string& what, const json& got, const json& want) {
    if (got != want)
      bad.push_back(what + ": got " + got.dump().substr(0, 300) + ", want " +
                    want.dump().substr(0, 300));
  };
  expectEq("text", r.message.content, c["text"]);
  json calls = json::array();
  for (const ToolCall& call : r.message.toolCalls) {
    calls.push_back({{"name", call.name}, {"arguments", parsedArguments(call.arguments)}});
  }
  expectEq("tool_calls", calls, c["tool_calls"]);
  json server = json::array();
  for (const ServerToolCall& call : serverToolCallsOf(r.message)) {
    json one = {{"name", call.name}};
    if (protocolOf(c) == Protocol::Anthropic) one["input"] = json::parse(call.input);
    server.push_back(std::move(one));
  }
  expectEq("server_tools", server, c["server_tools"]);
  expectEq("finish_reason", r.finishReason, c["finish_reason"]);
  if (c["usage"].is_object()) {
    if (!r.usage) {
      bad.push_back("usage: none");
    } else {
      expectEq("usage",
               json{{"prompt", r.usage->promptTokens}, {"completion", r.usage->completionTokens}},
               c["usage"]);
    }
  }
  auto reasoning = r.message.extra.find("reasoning_content");
  expectEq("reasoning",
           reasoning != r.message.extra.end() && reasoning->is_string() &&
               !reasoning->get<std::string>().empty(),
           c["reasoning"]);
  return bad;
}

// The assistant turn as the next request carries it.
std::vector<std::string> checkNextRequest(const json& c, const json& body) {
  std::vector<std::string> bad;
  switch (protocolOf(c)) {
    case Protocol::Anthropic: {
      const json& sent = body["messages"][1];
      if (sent["role"] != "assistant" || sent["content"] != c["next_assistant"]) {
        bad.push_back("next request's assistant turn: " + sent.dump().substr(0, 400) + ", want " +
                      c["next_assistant"].dump().substr(0, 400));
      }
      break;
    }
    case Protocol::OpenAiResponses: {
      json items = json::array();
      json types = json::array();
      const json& input = body["input"];
      for (size_t i = 1; i < input.size(); ++i) {
        const json& item = input[i];
        if (item.value("type", "") == "function_call_output" ||
            (item.value("type", "") == "message" && item.value("role", "") == "user")) {
          break;
        }
        items.push_back(item);
        types.push_back(item.value("type", ""));
      }
      if (types != c["next_assistant_types"]) {
        bad.push_back("next request's items: " + types.dump() + ", want " +
                      c["next_assistant_types"].dump());
      } else if (c.contains("next_assistant") && items != c["next_assistant"]) {
        bad.push_back("next request's items differ from the output as sent");
      }
      break;
    }
    case Protocol::Gemini: {
      // The model turn: the text, the calls, and every signature exactly where it came.
      const json& sent = body["contents"][1];
      std::string text;
      json names = json::array();
      json signatures = json::array();
      for (const json& part : sent.value("parts", json::array())) {
        if (part.contains("text") && !part.value("thought", false)) text += part["text"];
        if (part.contains("functionCall")) names.push_back(part["functionCall"]["name"]);
        if (part.contains("thoughtSignature")) signatures.push_back(part["thoughtSignature"]);
      }
      json want = json::array();
      for (const json& call : c["tool_calls"])
        want.push_back(call["name"]);
      if (sent["role"] != "model" || text != c["text"] || names != want ||
          signatures != c["signatures"]) {
        bad.push_back("next request's model turn: " + sent.dump().substr(0, 400));
      }
      break;
    }
    case Protocol::OpenAiChat: {
      const json& sent = body["messages"][1];
      const json text = sent["content"].is_string() ? sent["content"] : json("");
      if (sent["role"] != "assistant" || text != c["text"] ||
          sent.value("tool_calls", json::array()).size() != c["tool_calls"].size()) {
        bad.push_back("next request's assistant message: " + sent.dump().substr(0, 300));
      }
      break;
    }
  }
  return bad;
}

// Runs one recording through the library: the first call, then the next request.
std::vector<std::string> runLibrary(const json& c) {
  auto server = serve(c);
  ClientOptions endpoint;
  endpoint.protocol = protocolOf(c);
  endpoint.baseUrl = server->baseUrl();
  endpoint.apiKey = "sk-test";
  endpoint.model = "m";
  endpoint.maxRetries = 0;
  endpoint.promptCache.mode = PromptCachePolicy::Mode::Off;
  ConversationOptions options;
  options.llm = makeClient(endpoint);
  options.stream = c["stream"].get<bool>();
  ConversationManager manager(options);
  manager.addMessage(Message::user("hi"));
  const std::string outcome = c["outcome"];
  ChatResult result;
  try {
    result = manager.executeLlmCall();
  } catch (const RefusalError& e) {
    if (outcome != "refusal") return {std::string("refused: ") + e.what()};
    if (e.explanation() != c["refusal"]) return {"refusal explanation: " + e.explanation()};
    return {};
  } catch (const HttpError& e) {
    if (outcome != "error") return {std::string("HttpError: ") + e.what()};
    if (e.apiMessage() != c["error"]) return {"error message: " + e.apiMessage()};
    return {};
  } catch (const ProtocolError& e) {
    // An empty reply, or a stream the provider's own SDK refuses too.
    if (outcome != "empty" && outcome != "malformed") {
      return {std::string("ProtocolError: ") + e.what()};
    }
    return {};
  }
  if (outcome != "reply") return {"a reply, where the outcome is " + outcome};
  std::vector<std::string> bad = checkReply(c, result);
  for (const ToolCall& call : result.message.toolCalls) {
    manager.addMessage(Message::tool(call.id, "done"));
  }
  manager.addMessage(Message::user("next"));
  try {
    manager.executeLlmCall();
  } catch (const Error&) {
    // The mock may not make sense of what it was sent back; the request is what is checked.
  }
  const std::vector<json> requests = server->requests();
  if (requests.size() != 2) {
    bad.push_back("the next request was not sent");
  } else {
    for (std::string& b : checkNextRequest(c, requests[1]["body"]))
      bad.push_back(std::move(b));
  }
  return bad;
}

// The same recording through `parley ask --json`.
std::vector<std::string> runCli(const json& c, const fs::path& scratch) {
  auto server = serve(c);
  const std::string protocol = c["protocol"] == "chat"        ? "openai-chat"
                               : c["protocol"] == "responses" ? "openai-responses"
                               : c["protocol"] == "gemini"    ? "gemini"
                                                              : "anthropic";
  std::vector<std::string> args = {
      "ask",     "--base-url", server->baseUrl(), "--api-key", "sk-test",
      "--model", "m",          "--protocol",      protocol,    "--json"};
  if (!c["stream"].get<bool>()) args.push_back("--no-stream");
  args.push_back("hi");
  const testing::CliRun run = testing::runCli(args, scratch);
  const std::string outcome = c["outcome"];
  const json out = json::parse(run.out, nullptr, false);
  std::vector<std::string> bad;
  auto fail = [&](const std::string& what) {
    bad.push_back(what + " (exit " + std::to_string(run.exitCode) + ", stderr " +
                  run.err.substr(0, 300) + ")");
  };
  if (outcome == "reply") {
    if (run.exitCode != 0 || !out.is_object()) {
      fail("no reply");
      return bad;
    }
    const json& m = out["message"];
    const json text = m["content"].is_string() ? m["content"] : json("");
    if (text != c["text"]) fail("text: " + text.dump().substr(0, 200));
    if (out["finish_reason"] != c["finish_reason"])
      fail("finish_reason: " + out["finish_reason"].dump());
    if (m.value("tool_calls", json::array()).size() != c["tool_calls"].size()) fail("tool calls");
  } else if (outcome == "refusal") {
    if (run.exitCode != 4 || !out.is_object() || out["refusal"] != c["refusal"]) fail("refusal");
  } else if (outcome == "error") {
    if (run.exitCode != 1 ||
        run.err.find(c["error"].get<std::string>().substr(0, 40)) == std::string::npos) {
      fail("error message");
    }
  } else if (run.exitCode != 1) {
    fail("an empty reply that did not fail");
  }
  return bad;
}

json corpus() {
  return json::parse(readFile(kCorpus / "expected.json"));
}

// Runs every recording through `run`, reports each failure and the pass counts per protocol.
void conform(const std::string& who,
             const std::function<std::vector<std::string>(const json&)>& run) {
  std::map<std::string, std::pair<int, int>> counts;  // protocol -> passed, total
  for (const json& c : corpus()) {
    const std::vector<std::string> bad = run(c);
    auto& [passed, total] = counts[c["protocol"]];
    ++total;
    if (bad.empty()) {
      ++passed;
      continue;
    }
    for (const std::string& b : bad)
      ADD_FAILURE() << c["file"].get<std::string>()
                    << (c.contains("segment") ? "#" + c["segment"].dump() : std::string()) << ": "
                    << b;
  }
  std::string summary = who + ":";
  for (const auto& [protocol, count] : counts) {
    summary += " " + protocol + " " + std::to_string(count.first) + " of " +
               std::to_string(count.second) + ";";
  }
  std::cout << summary << "\n";
  ::testing::Test::RecordProperty("summary", summary);
}

TEST(ProviderCorpus, CoversEveryProtocol) {
  std::map<std::string, int> counts;
  for (const json& c : corpus())
    ++counts[c["protocol"]];
  EXPECT_GE(counts["chat"], 40);
  EXPECT_GE(counts["anthropic"], 60);
  EXPECT_GE(counts["responses"], 80);
  EXPECT_GE(counts["gemini"], 30);
}

TEST(ProviderCorpus, EveryRecordingThroughTheLibrary) {
  conform("library", runLibrary);
}

TEST(ProviderCorpus, EveryRecordingThroughTheCli) {
  const fs::path scratch =
      fs::temp_directory_path() / ("parley-corpus-" + std::to_string(::getpid()));
  conform("parley ask", [&](const json& c) { return runCli(c, scratch); });
  fs::remove_all(scratch);
}

}  // namespace
}  // namespace parley
