// The four protocols end to end against `parley mock`, which answers each in the protocol the
// request came in from the same script: a tool loop of two calls over each, streamed and not,
// where the mock refuses (400, as the real APIs do) a follow-up that lacks the thinking signature
// or the encrypted reasoning item; a conversation moved from one protocol to another; bad streams.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"
#include "parley/tools.hpp"
#include "png_fixture.hpp"
#include "store/sqlite_store.hpp"

namespace parley {
namespace {

using nlohmann::json;

// Two rounds of tool calls with reasoning, then the answer.
const char* kTwoCalls = R"(
{"match": {"request": 1}, "reply": {"reasoning_content": "Oslo first.", "content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "chunk_size": 3, "usage": {"prompt_tokens": 50, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 20}}}}
{"match": {"request": 2}, "reply": {"reasoning_content": "Now Paris.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}}
{"match": {"request": 3}, "reply": {"content": "Both: {{tool_results}}"}}
)";

struct Case {
  Protocol protocol;
  bool stream;
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name(toString(info.param.protocol));
  for (char& c : name)
    if (c == '-') c = '_';
  return name + (info.param.stream ? "_stream" : "_plain");
}

class ProtocolsAgainstMock : public ::testing::TestWithParam<Case> {
 protected:
  void serve(const std::string& script) {
    mock::MockOptions options;
    options.script = mock::readScript(script);
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  ClientOptions endpoint(Protocol protocol) {
    ClientOptions o;
    o.protocol = protocol;
    o.baseUrl = server_->baseUrl();
    o.apiKey = "sk-test";
    o.model = "mock-model";
    o.maxRetries = 0;
    return o;
  }

  ConversationOptions conversation(Protocol protocol, bool stream) {
    tools_->add("get_weather", "Weather for a city",
                json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})"),
                [](const json& args, ToolContext&) -> json {
                  return args["city"].get<std::string>() + " -3C";
                });
    ConversationOptions o;
    o.llm = makeClient(endpoint(protocol));
    o.tools = tools_;
    o.systemPrompt = "Be terse.";
    o.stream = stream;
    // Anthropic: thinking on, so that the API (and the mock) insist on the thinking blocks.
    if (protocol == Protocol::Anthropic) {
      o.request.extra = {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}};
    }
    // Gemini: thoughts shown; the mock insists on the signatures as Gemini 3 does.
    if (protocol == Protocol::Gemini) {
      o.request.extra = {{"generationConfig", {{"thinkingConfig", {{"includeThoughts", true}}}}}};
    }
    return o;
  }

  std::unique_ptr<mock::MockServer> server_;
  std::shared_ptr<ToolRegistry> tools_ = std::make_shared<ToolRegistry>();
};

TEST_P(ProtocolsAgainstMock, ToolLoopOfTwoCallsKeepsWhatTheProviderSent) {
  const auto [protocol, stream] = GetParam();
  serve(kTwoCalls);
  ConversationManager c(conversation(protocol, stream));
  RunResult result = c.run("Weather in Oslo and Paris?");
  EXPECT_EQ(result.iterations, 3);
  EXPECT_EQ(result.finishReason, "stop");
  EXPECT_EQ(result.content, "Both: Paris -3C");
  const std::vector<Message> view = c.getMessages();
  ASSERT_EQ(view.size(), 7u);  // system, user, assistant+call, tool, assistant+call, tool, answer
  EXPECT_EQ(view[2].content, "Checking.");
  ASSERT_EQ(view[2].toolCalls.size(), 1u);
  EXPECT_EQ(view[2].toolCalls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(view[3], Message::tool(view[2].toolCalls[0].id, "Oslo -3C"));
  EXPECT_EQ(view[2].extra["reasoning_content"], "Oslo first.");
  // Usage in one meaning: cached tokens inside prompt_tokens, total = prompt + completion.
  ASSERT_TRUE(view[2].usage);
  EXPECT_EQ(view[2].usage->promptTokens, 50);
  EXPECT_EQ(view[2].usage->totalTokens, 57);
  EXPECT_EQ(view[2].usage->raw["prompt_tokens_details"]["cached_tokens"], 20);

  const std::vector<json> requests = server_->requests();
  ASSERT_EQ(requests.size(), 3u);
  const char* path = protocol == Protocol::Anthropic         ? "/v1/messages"
                     : protocol == Protocol::OpenAiResponses ? "/v1/responses"
                     : protocol == Protocol::Gemini
                         ? (stream ? "/v1/models/mock-model:streamGenerateContent"
                                   : "/v1/models/mock-model:generateContent")
                         : "/v1/chat/completions";
  for (const json& r : requests) {
    EXPECT_EQ(r["path"], path);
    if (protocol != Protocol::Gemini) {
      EXPECT_EQ(r["body"].value("stream", false), stream);
    }
  }
  const json& second = requests[1];
  switch (protocol) {
    case Protocol::Anthropic:
      EXPECT_EQ(second["headers"]["x-api-key"], "sk-test");
      EXPECT_EQ(second["headers"]["anthropic-version"], "2023-06-01");
      EXPECT_FALSE(second["headers"].contains("authorization"));
      EXPECT_EQ(view[2].extra["thinking_blocks"][0]["signature"],
                second["body"]["messages"][1]["content"][0]["signature"]);
      EXPECT_EQ(second["body"]["system"][0]["text"], "Be terse.");
      break;
    case Protocol::OpenAiResponses:
      EXPECT_EQ(second["headers"]["authorization"], "Bearer sk-test");
      EXPECT_EQ(second["body"]["store"], false);
      EXPECT_EQ(view[2].extra["reasoning_items"][0]["encrypted_content"],
                second["body"]["input"][1]["encrypted_content"]);
      EXPECT_EQ(second["body"]["input"][3]["call_id"], view[2].toolCalls[0].id);
      break;
    case Protocol::OpenAiChat:
      EXPECT_EQ(second["body"]["messages"][2]["reasoning_content"], "Oslo first.");
      break;
    case Protocol::Gemini: {
      EXPECT_EQ(second["headers"]["x-goog-api-key"], "sk-test");
      EXPECT_FALSE(second["headers"].contains("authorization"));
      EXPECT_EQ(second["body"]["systemInstruction"]["parts"][0]["text"], "Be terse.");
      // The model turn goes back as Gemini sent it: the thought, the text, the signed call.
      const json& parts = second["body"]["contents"][1]["parts"];
      EXPECT_EQ(parts, view[2].extra["gemini_parts"]);
      ASSERT_EQ(parts.size(), 3u);
      EXPECT_EQ(parts[0]["thought"], true);
      EXPECT_FALSE(parts[2].value("thoughtSignature", "").empty());
      EXPECT_EQ(second["body"]["contents"][2]["parts"][0]["functionResponse"]["response"]["output"],
                "Oslo -3C");
      break;
    }
  }

  // The store keeps what the provider sent (the message JSON is opaque to it): reloaded, the
  // messages are the same, signatures and encrypted reasoning included.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("parley-protocols-" + std::to_string(::getpid()) + "-" +
                    std::string(toString(protocol)) + (stream ? "-s" : "-p"));
  std::filesystem::create_directories(dir);
  {
    SqliteStore store((dir / "t.db").string());
    store.createThread({.id = "t"}, view);
    const std::vector<Message> loaded = store.loadThread("t").messages;
    EXPECT_EQ(loaded, view);
  }
  std::filesystem::remove_all(dir);
}

// An image and a pdf reach the mock in each protocol's form, which the mock reads back into parts:
// the rule matches the image part, and the reply names what the mock saw.
TEST_P(ProtocolsAgainstMock, ImageAndDocumentPartsReachTheServer) {
  const auto [protocol, stream] = GetParam();
  serve(R"({"match": {"user_part": "image/png"}, "reply": {"content": "saw {{user_parts}}"}}
{"reply": {"content": "no image"}})");
  ConversationManager c(conversation(protocol, stream));
  const std::string png = test::makePng(3, 2);
  const Message prompt = Message::user({Part::text("What is this?"), Part::imageBytes(png),
                                        Part::fileBytes("%PDF-1.4 x", "spec.pdf")});
  RunResult result = c.run(std::vector<Message>{prompt});
  // Gemini's inlineData has no file name (docs/protocols.md).
  EXPECT_EQ(result.content, protocol == Protocol::Gemini
                                ? "saw image/png 3x2, application/pdf"
                                : "saw image/png 3x2, application/pdf spec.pdf");
  EXPECT_EQ(c.getMessages()[1], prompt);
  const std::vector<json> requests = server_->requests();
  ASSERT_EQ(requests.size(), 1u);
  // The recorded request holds the bytes as the protocol carries them.
  EXPECT_NE(requests[0]["body"].dump().find(base64Encode(png)), std::string::npos);
}

// A part the protocol cannot carry is refused before anything is sent.
TEST_P(ProtocolsAgainstMock, AudioWhereTheProtocolHasNoneIsRefusedBeforeSending) {
  const auto [protocol, stream] = GetParam();
  serve(R"({"reply": {"content": "heard {{user_parts}}"}})");
  ConversationManager c(conversation(protocol, stream));
  const std::string wav = std::string("RIFF\x24\x00\x00\x00WAVEfmt ", 16) + std::string(28, 'a');
  const Message prompt = Message::user({Part::text("Listen"), Part::audioBytes(wav)});
  if (protocol == Protocol::OpenAiChat || protocol == Protocol::Gemini) {
    EXPECT_EQ(c.run(std::vector<Message>{prompt}).content, "heard audio/wav");
    return;
  }
  const size_t before = c.getMessages().size();
  try {
    c.run(std::vector<Message>{prompt});
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("audio"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_EQ(c.getMessages().size(), before);
}

TEST_P(ProtocolsAgainstMock, FailedCallLeavesTheHistoryAsItWas) {
  const auto [protocol, stream] = GetParam();
  serve(
      stream
          ? R"({"reply": {"content": "cut short"}, "stream": {"omit_finish": true, "omit_done": true}})"
          : R"({"error": {"status": 400, "message": "bad request body"}})");
  ConversationManager c(conversation(protocol, stream));
  c.addMessage(Message::user("before"));
  const size_t before = c.getMessages().size();
  if (stream) {
    EXPECT_THROW(c.run("hello"), ProtocolError);
  } else {
    EXPECT_THROW(c.run("hello"), HttpError);
  }
  EXPECT_EQ(c.getMessages().size(), before);
}

INSTANTIATE_TEST_SUITE_P(
    EachProtocol, ProtocolsAgainstMock,
    ::testing::Values(Case{Protocol::OpenAiChat, false}, Case{Protocol::OpenAiChat, true},
                      Case{Protocol::OpenAiResponses, false}, Case{Protocol::OpenAiResponses, true},
                      Case{Protocol::Anthropic, false}, Case{Protocol::Anthropic, true},
                      Case{Protocol::Gemini, false}, Case{Protocol::Gemini, true}),
    caseName);

class ProtocolMock : public ProtocolsAgainstMock {};

// The first round's messages, then `edit` applied to its assistant message, sent again.
int statusOfFollowUp(LlmClient& client, ChatRequest request,
                     const std::function<void(Message&)>& edit) {
  ChatResult first = client.generate(request);
  Message assistant = first.message;
  edit(assistant);
  request.messages.push_back(assistant);
  request.messages.push_back(Message::tool(assistant.toolCalls.at(0).id, "Oslo -3C"));
  try {
    client.generate(request);
    return 200;
  } catch (const HttpError& e) {
    return e.status();
  }
}

TEST_F(ProtocolMock, AnthropicRefusesAToolTurnWithoutItsThinkingSignature) {
  serve(kTwoCalls);
  auto client = makeClient(endpoint(Protocol::Anthropic));
  ChatRequest request;
  request.messages = {Message::user("Weather?")};
  request.tools = json::parse(R"([{"type":"function","function":{"name":"get_weather"}}])");
  request.extra = {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}};
  EXPECT_EQ(
      statusOfFollowUp(*client, request, [](Message& m) { m.extra.erase("thinking_blocks"); }),
      400);
  server_->setScript(mock::readScript(kTwoCalls));
  EXPECT_EQ(
      statusOfFollowUp(*client, request,
                       [](Message& m) { m.extra["thinking_blocks"][0]["signature"] = "forged"; }),
      400);
  server_->setScript(mock::readScript(kTwoCalls));
  EXPECT_EQ(statusOfFollowUp(*client, request, [](Message&) {}), 200);
}

TEST_F(ProtocolMock, GeminiRefusesACallTurnThatLostItsSignature) {
  serve(kTwoCalls);
  auto client = makeClient(endpoint(Protocol::Gemini));
  ChatRequest request;
  request.messages = {Message::user("Weather?")};
  request.tools = json::parse(R"([{"type":"function","function":{"name":"get_weather"}}])");
  // The signature lost from the kept parts, or forged: refused, as Gemini 3 refuses them.
  EXPECT_EQ(statusOfFollowUp(*client, request,
                             [](Message& m) {
                               for (auto& p : m.extra["gemini_parts"])
                                 p.erase("thoughtSignature");
                             }),
            400);
  server_->setScript(mock::readScript(kTwoCalls));
  EXPECT_EQ(statusOfFollowUp(*client, request,
                             [](Message& m) {
                               for (auto& p : m.extra["gemini_parts"])
                                 if (p.contains("thoughtSignature"))
                                   p["thoughtSignature"] = "forged";
                             }),
            400);
  server_->setScript(mock::readScript(kTwoCalls));
  EXPECT_EQ(statusOfFollowUp(*client, request, [](Message&) {}), 200);
}

TEST_F(ProtocolMock, ResponsesRefusesACallWithoutItsReasoningItem) {
  serve(kTwoCalls);
  auto client = makeClient(endpoint(Protocol::OpenAiResponses));
  ChatRequest request;
  request.messages = {Message::user("Weather?")};
  request.tools = json::parse(R"([{"type":"function","function":{"name":"get_weather"}}])");
  EXPECT_EQ(
      statusOfFollowUp(*client, request, [](Message& m) { m.extra.erase("reasoning_items"); }),
      400);
  server_->setScript(mock::readScript(kTwoCalls));
  EXPECT_EQ(statusOfFollowUp(*client, request, [](Message&) {}), 200);
}

TEST_F(ProtocolMock, AConversationMovesFromOneProtocolToAnother) {
  serve(R"(
{"match": {"last_role": "tool"}, "reply": {"content": "Done: {{tool_results}}"}}
{"match": {"user_contains": "weather"}, "reply": {"reasoning_content": "Look it up.", "content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}}
{"reply": {"content": "Echo {{last_user}}"}}
)");
  ConversationOptions options = conversation(Protocol::Anthropic, true);
  ConversationManager c(options);
  c.run("weather in Oslo?");
  const std::vector<Message> anthropicTurn = c.getMessages();
  ASSERT_EQ(anthropicTurn.size(), 5u);
  ASSERT_TRUE(anthropicTurn[2].extra.contains("thinking_blocks"));

  for (Protocol next : {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Gemini}) {
    SCOPED_TRACE(std::string(toString(next)));
    server_->clearRequests();
    ChatRequest request;
    request.messages = anthropicTurn;
    request.messages.push_back(Message::user("thanks"));
    ChatResult r = makeClient(endpoint(next))->generate(request);
    EXPECT_EQ(r.message.content, "Echo thanks");
    const json body = server_->requests().at(0)["body"];
    const std::string text = body.dump();
    // The thinking blocks cannot travel; the text, the call and its result do.
    EXPECT_EQ(text.find("thinking_blocks"), std::string::npos);
    EXPECT_EQ(
        text.find(anthropicTurn[2].extra["thinking_blocks"][0]["signature"].get<std::string>()),
        std::string::npos);
    EXPECT_NE(text.find("Checking."), std::string::npos);
    EXPECT_NE(text.find(anthropicTurn[2].toolCalls[0].id), std::string::npos);
    EXPECT_NE(text.find("Oslo -3C"), std::string::npos);
  }
}

// One thread, each turn (a tool call, its result, the answer) on the next protocol, through all
// four and back, thinking on where the protocol has it: no mock refuses a request, though each
// enforces its provider's rules on what the turns before sent.
TEST_F(ProtocolMock, AThreadMovesThroughAllFourProtocolsWithoutA4xx) {
  serve(R"(
{"match": {"last_role": "tool"}, "reply": {"reasoning_content": "Answer.", "content": "Done: {{tool_results}}"}}
{"reply": {"reasoning_content": "Look it up.", "content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]}}
)");
  std::vector<Message> thread = {Message::system("Be terse.")};
  int round = 0;
  for (Protocol p :
       {Protocol::Anthropic, Protocol::Gemini, Protocol::OpenAiResponses, Protocol::OpenAiChat,
        Protocol::Gemini, Protocol::Anthropic, Protocol::OpenAiResponses, Protocol::Gemini}) {
    SCOPED_TRACE(std::string(toString(p)) + " round " + std::to_string(++round));
    auto client = makeClient(endpoint(p));
    ChatRequest request;
    request.tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
    if (p == Protocol::Anthropic) {
      request.extra = {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}};
    }
    if (p == Protocol::Gemini) {
      request.extra = {{"generationConfig", {{"thinkingConfig", {{"includeThoughts", true}}}}}};
    }
    thread.push_back(Message::user("weather, round " + std::to_string(round)));
    request.messages = thread;
    ChatResult calls;
    ASSERT_NO_THROW(calls = client->generate(request));
    ASSERT_EQ(calls.message.toolCalls.size(), 2u);
    thread.push_back(calls.message);
    for (const ToolCall& call : calls.message.toolCalls) {
      thread.push_back(Message::tool(
          call.id, json::parse(call.arguments)["city"].get<std::string>() + " sunny"));
    }
    request.messages = thread;
    request.stream = round % 2 == 0;
    ChatResult answer;
    ASSERT_NO_THROW(answer = client->generate(request));
    EXPECT_EQ(answer.message.content, "Done: Oslo sunny; Rome sunny");
    thread.push_back(answer.message);
  }
}

TEST_F(ProtocolMock, ErrorEventsInEachProtocolAreHttpErrors) {
  for (Protocol p :
       {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic, Protocol::Gemini}) {
    SCOPED_TRACE(std::string(toString(p)));
    serve(
        R"({"reply": {"content": "a b c d"}, "stream": {"error_after": 2, "error": {"type": "invalid_request_error", "message": "mock stream error", "code": "bad"}}})");
    ChatRequest request;
    request.messages = {Message::user("x")};
    try {
      makeClient(endpoint(p))->generateStream(request, [](const StreamDelta&) { return true; });
      FAIL() << "expected HttpError";
    } catch (const HttpError& e) {
      EXPECT_EQ(e.details().apiMessage, "mock stream error");
    }
  }
}

}  // namespace
}  // namespace parley
