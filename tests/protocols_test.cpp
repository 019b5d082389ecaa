// The Anthropic Messages and OpenAI Responses protocols without a server: their request writers
// (roles, tools, caching breakpoints, byte-stable bodies), their reply readers over sample streams
// cut at every byte, bad streams, usage in one meaning, and the provider-field rules.
#include <gtest/gtest.h>

#include "client/anthropic_reply.hpp"
#include "client/anthropic_request.hpp"
#include "client/provider_fields.hpp"
#include "client/request_body.hpp"
#include "client/responses_reply.hpp"
#include "client/responses_request.hpp"
#include "client/stream_assembler.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/protocol.hpp"
#include "parley/server_tools.hpp"
#include "parley/sse.hpp"

namespace parley::detail {
namespace {

using nlohmann::json;

// A Claude reply with thinking (and its signature), text and a tool call, as the API streams it.
const std::string kAnthropicStream =
    "event: message_start\n"
    R"(data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":1}}})"
    "\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n"
    "event: content_block_start\n"
    R"(data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Need the "}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"weather é."}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBsig=="}})"
    "\n\nevent: content_block_stop\n"
    R"(data: {"type":"content_block_stop","index":0})"
    "\n\nevent: content_block_start\n"
    R"(data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking"}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" Oslo."}})"
    "\n\nevent: content_block_stop\n"
    R"(data: {"type":"content_block_stop","index":1})"
    "\n\nevent: content_block_start\n"
    R"(data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Os"}})"
    "\n\nevent: content_block_delta\n"
    R"(data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"lo\", \"a\": 1}"}})"
    "\n\nevent: content_block_stop\n"
    R"(data: {"type":"content_block_stop","index":2})"
    "\n\nevent: message_delta\n"
    R"(data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}})"
    "\n\nevent: message_stop\n"
    R"(data: {"type":"message_stop"})"
    "\n\n";

// An OpenAI reasoning model's reply: a reasoning item with encrypted content, text, a call.
const std::string kResponsesStream =
    R"(data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":7,"status":"in_progress","model":"o4-mini","output":[]}})"
    "\n\n"
    R"(data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}})"
    "\n\n"
    R"(data: {"type":"response.reasoning_summary_text.delta","sequence_number":2,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Think é"})"
    "\n\n"
    R"(data: {"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Think é"}],"encrypted_content":"gAAAAenc"}})"
    "\n\n"
    R"(data: {"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}})"
    "\n\n"
    R"(data: {"type":"response.content_part.added","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}})"
    "\n\n"
    R"(data: {"type":"response.output_text.delta","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Checking"})"
    "\n\n"
    R"(data: {"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":" Oslo."})"
    "\n\n"
    R"(data: {"type":"response.output_text.done","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Checking Oslo."})"
    "\n\n"
    R"(data: {"type":"response.output_item.done","sequence_number":9,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking Oslo.","annotations":[]}]}})"
    "\n\n"
    R"(data: {"type":"response.output_item.added","sequence_number":10,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"get_weather"}})"
    "\n\n"
    R"(data: {"type":"response.function_call_arguments.delta","sequence_number":11,"item_id":"fc_1","output_index":2,"delta":"{\"city\": \"Os"})"
    "\n\n"
    R"(data: {"type":"response.function_call_arguments.delta","sequence_number":12,"item_id":"fc_1","output_index":2,"delta":"lo\"}"})"
    "\n\n"
    R"(data: {"type":"response.function_call_arguments.done","sequence_number":13,"item_id":"fc_1","output_index":2,"arguments":"{\"city\": \"Oslo\"}"})"
    "\n\n"
    R"(data: {"type":"response.output_item.done","sequence_number":14,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\": \"Oslo\"}","call_id":"call_1","name":"get_weather"}})"
    "\n\n"
    R"(data: {"type":"response.completed","sequence_number":15,"response":{"id":"resp_1","object":"response","created_at":7,"status":"completed","model":"o4-mini","output":[],"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":150}}})"
    "\n\n";

// Feeds `stream` to `add` in two pieces split at `at`; returns the deltas' text, reasoning and
// arguments joined, so that every split point can be compared.
template <typename Assembler>
std::string feed(Assembler& assembler, const std::string& stream, size_t at) {
  SseDecoder decoder;
  std::string seen;
  auto onEvent = [&](const SseEvent& e) {
    const StreamDelta& d = assembler.addEvent(e.data);
    seen += d.content + "|" + d.reasoning;
    for (const auto& call : d.toolCalls)
      seen += "#" + call.id + call.name + call.arguments;
    return true;
  };
  decoder.feed(std::string_view(stream).substr(0, at), onEvent);
  decoder.feed(std::string_view(stream).substr(at), onEvent);
  decoder.finish(onEvent);
  return seen;
}

TEST(AnthropicReader, SampleStreamAtEverySplitPoint) {
  std::string first;
  for (size_t at = 0; at <= kAnthropicStream.size(); ++at) {
    AnthropicAssembler assembler;
    const std::string seen = feed(assembler, kAnthropicStream, at);
    if (at == 0) first = seen;
    ASSERT_EQ(seen, first) << "split at " << at;
    ChatResult r = assembler.finish();
    ASSERT_EQ(r.message.content, "Checking Oslo.") << at;
    ASSERT_EQ(r.message.toolCalls.size(), 1u);
    // The arguments exactly as the model wrote them, spaces included.
    ASSERT_EQ(r.message.toolCalls[0],
              (ToolCall{"toolu_1", "get_weather", R"({"city": "Oslo", "a": 1})"}));
    ASSERT_EQ(
        r.message.extra["thinking_blocks"],
        json::parse(
            R"([{"type":"thinking","thinking":"Need the weather é.","signature":"EqQBsig=="}])"));
    ASSERT_EQ(r.message.extra["reasoning_content"], "Need the weather é.");
    ASSERT_EQ(r.finishReason, "tool_calls");
    ASSERT_EQ(r.reportedFinishReason, "tool_use");
    ASSERT_TRUE(r.usage);
    // Every input token counts, cache reads and writes included; total = prompt + completion.
    ASSERT_EQ(r.usage->promptTokens, 115);
    ASSERT_EQ(r.usage->completionTokens, 42);
    ASSERT_EQ(r.usage->totalTokens, 157);
    ASSERT_EQ(r.usage->raw["prompt_tokens_details"]["cached_tokens"], 100);
    ASSERT_EQ(r.usage->raw["prompt_tokens_details"]["cache_creation_tokens"], 5);
    ASSERT_EQ(r.id, "msg_1");
    ASSERT_EQ(r.raw["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  }
  EXPECT_NE(first.find("Need the |"), std::string::npos);  // the delta, not the whole text
}

TEST(AnthropicReader, StopReasonsMapToFinishReasons) {
  for (auto [reported, expected] :
       std::vector<std::pair<std::string, std::string>>{{"end_turn", "stop"},
                                                        {"stop_sequence", "stop"},
                                                        {"max_tokens", "length"},
                                                        {"refusal", "refusal"},
                                                        {"pause_turn", "pause_turn"}}) {
    ChatResult r = resultFromAnthropicMessage(
        R"({"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"hi"}],"stop_reason":")" +
        reported + R"(","usage":{"input_tokens":3,"output_tokens":4}})");
    EXPECT_EQ(r.finishReason, expected) << reported;
    EXPECT_EQ(r.reportedFinishReason, reported);
    EXPECT_EQ(r.usage->totalTokens, 7);
  }
}

TEST(AnthropicReader, WholeMessageReadsLikeTheStream) {
  ChatResult r =
      resultFromAnthropicMessage(R"({"id":"msg_2","type":"message","role":"assistant","model":"c",
    "content":[{"type":"thinking","thinking":"hm","signature":"s1"},{"type":"redacted_thinking","data":"xyz"},
               {"type":"tool_use","id":"toolu_9","name":"f","input":{"b":2,"a":1}}],
    "stop_reason":"tool_use","usage":{"input_tokens":3,"cache_read_input_tokens":4,"output_tokens":5}})");
  ASSERT_EQ(r.message.toolCalls.size(), 1u);
  EXPECT_EQ(r.message.toolCalls[0].arguments, R"({"b":2,"a":1})");  // the model's key order
  EXPECT_EQ(r.message.extra["thinking_blocks"].size(), 2u);
  EXPECT_EQ(r.message.extra["thinking_blocks"][1]["type"], "redacted_thinking");
  EXPECT_EQ(r.usage->promptTokens, 7);
  EXPECT_EQ(r.finishReason, "tool_calls");
}

// Deltas of the usual shape are read by hand, others by a JSON parser: both must read the same.
// Spaces after the colons (valid JSON) send an event down the parser's path.
TEST(AnthropicReader, HandReadDeltasReadAsTheParserReadsThem) {
  const std::vector<std::pair<std::string, std::string>> deltas = {
      {"text_delta", R"(plain words)"},
      {"text_delta", R"(an escape: \"quoted\" \\ \n and \u00e9)"},
      {"text_delta", "multi-byte: \xC3\xA9\xE2\x82\xAC"},
      {"text_delta", ""},
      {"thinking_delta", "thought"},
      {"signature_delta", "c2ln"},
  };
  auto read = [](bool spaced, const std::string& type, const std::string& piece) {
    AnthropicAssembler a;
    const char* colon = spaced ? ": " : ":";
    const std::string kind = type == "text_delta" ? "text" : "thinking";
    a.addEvent(R"({"type":"message_start","message":{"id":"m","model":"c","usage":{}}})");
    a.addEvent(R"({"type":"content_block_start","index":0,"content_block":{"type":")" + kind +
               R"("}})");
    const std::string field = type == "text_delta"       ? "text"
                              : type == "thinking_delta" ? "thinking"
                                                         : "signature";
    const StreamDelta& d =
        a.addEvent(std::string(R"({"type")") + colon + R"("content_block_delta","index")" + colon +
                   R"(0,"delta")" + colon + R"({"type")" + colon + "\"" + type + "\",\"" + field +
                   "\"" + colon + "\"" + piece + "\"}}");
    const std::string seen = d.content + "|" + d.reasoning;
    a.addEvent(R"({"type":"content_block_stop","index":0})");
    a.addEvent(R"({"type":"message_stop"})");
    ChatResult r = a.finish();
    return seen + "|" + r.message.content + "|" + r.message.extra.dump();
  };
  for (const auto& [type, piece] : deltas) {
    EXPECT_EQ(read(false, type, piece), read(true, type, piece)) << type << " " << piece;
  }
  EXPECT_NE(read(false, "text_delta", R"(\u00e9)").find("\xC3\xA9"), std::string::npos);
  // Invalid UTF-8, a raw control character, a leading zero or a cut event: an error, not text.
  const std::string head =
      R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":")";
  for (
      const std::string& bad :
      {head + "\xC3(\"}}", head + "a\x01\"}}", head + "a\"}",
       std::string(
           R"({"type":"content_block_delta","index":00,"delta":{"type":"text_delta","text":"a"}})")}) {
    AnthropicAssembler a;
    a.addEvent(R"({"type":"message_start","message":{"id":"m","model":"c","usage":{}}})");
    a.addEvent(R"({"type":"content_block_start","index":0,"content_block":{"type":"text"}})");
    EXPECT_THROW(a.addEvent(bad), ProtocolError) << bad;
  }
  {  // a delta for a block never started, by hand or not
    AnthropicAssembler a;
    a.addEvent(R"({"type":"message_start","message":{"id":"m","model":"c","usage":{}}})");
    EXPECT_THROW(
        a.addEvent(
            R"({"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"a"}})"),
        ProtocolError);
  }
}

TEST(AnthropicReader, BadStreamsAreClearErrors) {
  {  // cut mid-block: no message_stop
    AnthropicAssembler a;
    feed(a, kAnthropicStream.substr(0, kAnthropicStream.find("event: content_block_stop")), 0);
    EXPECT_FALSE(a.sawStop());
    EXPECT_THROW(a.finish(), ProtocolError);
  }
  {  // a delta for a stopped block
    AnthropicAssembler a;
    a.addEvent(R"({"type":"message_start","message":{"id":"m","model":"c","usage":{}}})");
    a.addEvent(R"({"type":"content_block_start","index":0,"content_block":{"type":"future"}})");
    a.addEvent(R"({"type":"content_block_stop","index":0})");
    EXPECT_THROW(
        a.addEvent(R"({"type":"content_block_delta","index":0,"delta":{"type":"x","y":"z"}})"),
        ProtocolError);
  }
  {  // the first event is not message_start
    AnthropicAssembler a;
    EXPECT_THROW(a.addEvent(R"({"type":"message_stop"})"), ProtocolError);
  }
  {  // an error event: overloaded_error is a 529, retried like the status
    AnthropicAssembler a;
    try {
      a.addEvent(R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
      FAIL();
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 529);
      EXPECT_EQ(e.details().apiType, "overloaded_error");
      EXPECT_EQ(e.details().apiMessage, "Overloaded");
    }
  }
}

TEST(ResponsesReader, SampleStreamAtEverySplitPoint) {
  std::string first;
  for (size_t at = 0; at <= kResponsesStream.size(); ++at) {
    ResponsesAssembler assembler;
    const std::string seen = feed(assembler, kResponsesStream, at);
    if (at == 0) first = seen;
    ASSERT_EQ(seen, first) << "split at " << at;
    ChatResult r = assembler.finish();
    ASSERT_EQ(r.message.content, "Checking Oslo.");
    ASSERT_EQ(r.message.toolCalls.size(), 1u);
    // The call_id is the tool call's id (the id its output answers); the item id is kept apart.
    ASSERT_EQ(r.message.toolCalls[0], (ToolCall{"call_1", "get_weather", R"({"city": "Oslo"})"}));
    ASSERT_EQ(r.message.extra["response_item_ids"],
              json({{"message", "msg_1"}, {"call_1", "fc_1"}}));
    ASSERT_EQ(r.message.extra["reasoning_items"][0]["encrypted_content"], "gAAAAenc");
    ASSERT_EQ(r.message.extra["reasoning_content"], "Think é");
    ASSERT_EQ(r.finishReason, "tool_calls");
    ASSERT_EQ(r.usage->promptTokens, 120);  // input_tokens already counts the cached ones
    ASSERT_EQ(r.usage->raw["prompt_tokens_details"]["cached_tokens"], 100);
    ASSERT_EQ(r.usage->raw["completion_tokens_details"]["reasoning_tokens"], 20);
    ASSERT_EQ(r.usage->totalTokens, 150);
    ASSERT_EQ(r.id, "resp_1");
    ASSERT_EQ(r.model, "o4-mini");
  }
}

// A message of `text` in a Responses stream whose done events repeat the whole text, as OpenAI
// sends them; with `deltas` false the text comes only in the done events.
std::string largeResponsesStream(const std::string& text, bool deltas) {
  const json quoted = text;
  const std::string item =
      R"({"id":"msg_9","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":)" +
      quoted.dump() + R"(,"annotations":[]}]})";
  std::string s =
      R"(data: {"type":"response.created","response":{"id":"resp_9","created_at":7,"status":"in_progress","model":"m","output":[]}})"
      "\n\n"
      R"(data: {"type":"response.output_item.added","output_index":0,"item":{"id":"msg_9","type":"message","role":"assistant","content":[]}})"
      "\n\n";
  for (size_t at = 0, next = 0; deltas && at < text.size(); at = next) {
    next = std::min(text.size(), at + 7);
    while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80)
      ++next;
    s +=
        R"(data: {"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":)" +
        json(text.substr(at, next - at)).dump() + "}\n\n";
  }
  s += R"(data: {"type":"response.output_text.done","output_index":0,"content_index":0,"text":)" +
       quoted.dump() + "}\n\n";
  s += R"(data: {"type":"response.output_item.done","output_index":0,"item":)" + item + "}\n\n";
  s +=
      R"(data: {"type":"response.completed","response":{"id":"resp_9","created_at":7,"status":"completed","model":"m","output":[)" +
      item +
      R"(],"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":40},"output_tokens":900,"output_tokens_details":{"reasoning_tokens":0}}}})"
      "\n\n";
  return s;
}

// The large events (the done events and response.completed repeat the output) take a path of
// their own that reads only the fields the reply needs: it must read them as the full path does.
TEST(ResponsesReader, LargeDoneEventsReadLikeSmallOnes) {
  std::string text;
  while (text.size() < 20000)
    text += "Fjord \"quoted\" é\n ";
  for (bool deltas : {true, false}) {
    const std::string stream = largeResponsesStream(text, deltas);
    for (size_t at : {size_t(0), stream.size() / 3, stream.size() - 5}) {
      ResponsesAssembler a;
      feed(a, stream, at);
      ASSERT_TRUE(a.sawEnd());
      ChatResult r = a.finish();
      EXPECT_EQ(r.message.content, text) << "deltas " << deltas;
      EXPECT_EQ(r.message.extra["response_item_ids"], json({{"message", "msg_9"}}));
      EXPECT_EQ(r.finishReason, "stop");
      EXPECT_EQ(r.usage->promptTokens, 50);
      EXPECT_EQ(r.usage->raw["prompt_tokens_details"]["cached_tokens"], 40);
      EXPECT_EQ(r.usage->totalTokens, 950);
      EXPECT_EQ(r.id, "resp_9");
      EXPECT_EQ(r.model, "m");
    }
  }
  {  // a large event after the end is refused as a small one is
    ResponsesAssembler a;
    const std::string stream = largeResponsesStream(text, true);
    feed(a, stream, 0);
    const size_t done = stream.find("data: {\"type\":\"response.output_text.done");
    const std::string event = stream.substr(done + 6, stream.find("\n\n", done) - done - 6);
    ASSERT_GT(event.size(), 4096u);
    EXPECT_THROW(a.addEvent(event), ProtocolError);
  }
  {  // a large event that is not JSON is the same clear error
    ResponsesAssembler a;
    EXPECT_THROW(
        a.addEvent(R"({"type":"response.completed","response":{"id":")" + std::string(5000, 'x')),
        ProtocolError);
  }
}

TEST(ResponsesReader, IncompleteResponseIsLength) {
  ChatResult r = resultFromResponse(R"({"id":"resp_2","object":"response","status":"incomplete",
    "incomplete_details":{"reason":"max_output_tokens"},"model":"m",
    "output":[{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"par"}]}],
    "usage":{"input_tokens":5,"output_tokens":9}})");
  EXPECT_EQ(r.message.content, "par");
  EXPECT_EQ(r.finishReason, "length");
  EXPECT_EQ(r.reportedFinishReason, "max_output_tokens");
  EXPECT_EQ(r.usage->totalTokens, 14);
}

TEST(ResponsesReader, BadStreamsAreClearErrors) {
  {  // cut before response.completed
    ResponsesAssembler a;
    feed(a,
         kResponsesStream.substr(0, kResponsesStream.find("data: {\"type\":\"response.completed")),
         0);
    EXPECT_FALSE(a.sawEnd());
    EXPECT_THROW(a.finish(), ProtocolError);
  }
  {  // a delta for an item never added
    ResponsesAssembler a;
    EXPECT_THROW(
        a.addEvent(R"({"type":"response.output_text.delta","output_index":3,"delta":"x"})"),
        ProtocolError);
  }
  {
    ResponsesAssembler a;
    try {
      a.addEvent(
          R"({"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null})");
      FAIL();
    } catch (const HttpError& e) {
      EXPECT_EQ(e.details().apiCode, "rate_limit_exceeded");
      EXPECT_EQ(e.details().apiMessage, "slow down");
    }
  }
  {
    ResponsesAssembler a;
    EXPECT_THROW(
        a.addEvent(
            R"({"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}})"),
        HttpError);
  }
}

ClientOptions endpoint(Protocol protocol, std::string baseUrl = "https://example.test/v1");

// Feeds whole events (their data) and returns the deltas the caller saw: client calls as
// "#index:id:name:args", provider-run calls as "@index:id:name:input".
template <typename Assembler>
std::string feedEvents(Assembler& a, const std::vector<std::string>& events) {
  std::string seen;
  for (const std::string& e : events) {
    const StreamDelta& d = a.addEvent(e);
    seen += d.content;
    for (const auto& c : d.toolCalls)
      seen += "#" + std::to_string(c.index) + ":" + c.id + ":" + c.name + ":" + c.arguments;
    for (const auto& c : d.serverToolCalls)
      seen += "@" + std::to_string(c.index) + ":" + c.id + ":" + c.name + ":" + c.input;
  }
  return seen;
}

const std::string kStart =
    R"({"type":"message_start","message":{"id":"m","model":"c","content":[],"usage":{"input_tokens":5}}})";

TEST(AnthropicReader, ServerToolsAreStreamedKeptAndNeverClientCalls) {
  AnthropicAssembler a;
  const std::string seen = feedEvents(
      a,
      {kStart,
       R"({"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}})",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"os"}})",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"lo\"}"}})",
       R"({"type":"content_block_stop","index":0})",
       R"({"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://x.test","encrypted_content":"E"}]}})",
       R"({"type":"content_block_stop","index":1})",
       R"({"type":"content_block_start","index":2,"content_block":{"type":"text","text":"","citations":[]}})",
       R"({"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{"type":"web_search_result_location","url":"https://x.test"}}})",
       R"({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Sunny."}})",
       R"({"type":"content_block_stop","index":2})",
       R"({"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"note","input":{}}})",
       R"({"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}})",
       R"({"type":"content_block_stop","index":3})",
       R"({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9,"server_tool_use":{"web_search_requests":1}}})",
       R"({"type":"message_stop"})"});
  // The search's input reached the caller as a provider-run call; the client call is call 0.
  EXPECT_EQ(seen,
            "@0:srvtoolu_1:web_search:@0:::{\"query\": "
            "\"os@0:::lo\"}Sunny.#0:toolu_1:note:#0:::{\"a\":1}");
  ChatResult r = a.finish();
  EXPECT_EQ(r.message.content, "Sunny.");
  ASSERT_EQ(r.message.toolCalls.size(), 1u);
  EXPECT_EQ(r.message.toolCalls[0], (ToolCall{"toolu_1", "note", R"({"a":1})"}));
  const std::vector<ServerToolCall> server = serverToolCallsOf(r.message);
  ASSERT_EQ(server.size(), 1u);
  EXPECT_EQ(server[0].name, "web_search");
  EXPECT_EQ(server[0].input, R"({"query":"oslo"})");
  EXPECT_EQ(server[0].result["content"][0]["encrypted_content"], "E");
  EXPECT_EQ(webSearchCount(r.message), 1u);
  EXPECT_EQ(r.usage->raw["server_tool_use"]["web_search_requests"], 1);
  // Kept whole and in order, citations included, and sent back so to Anthropic only.
  const json& content = r.message.extra[std::string(kAnthropicContent)];
  ASSERT_EQ(content.size(), 4u);
  EXPECT_EQ(content[0]["input"], json({{"query", "oslo"}}));
  EXPECT_EQ(content[2]["citations"][0]["url"], "https://x.test");
  std::vector<Message> messages = {Message::user("Weather?"), r.message,
                                   Message::tool("toolu_1", "ok")};
  ChatRequest request;
  request.model = "m";
  request.messages = messages;
  ClientOptions o = endpoint(Protocol::Anthropic);
  o.promptCache.mode = PromptCachePolicy::Mode::Off;
  const json body = json::parse(buildAnthropicBody(request, o, false));
  EXPECT_EQ(body["messages"][1]["content"], content);
  const json chat = json::parse(buildRequestBody(request, endpoint(Protocol::OpenAiChat), false));
  EXPECT_FALSE(chat["messages"][1].contains("anthropic_content"));
}

TEST(AnthropicReader, CallsGivenWholeInMessageStartOrContentBlockStart) {
  // Programmatic tool calling: a call made by code arrives whole, with its caller.
  AnthropicAssembler a;
  const std::string seen = feedEvents(
      a,
      {R"({"type":"message_start","message":{"id":"m","model":"c","content":[{"type":"tool_use","id":"toolu_9","name":"lookup","input":{"z":1,"a":2},"caller":{"type":"code_execution_20250825","tool_id":"srvtoolu_2"}}],"usage":{"input_tokens":5}}})",
       R"({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_10","name":"lookup","input":{"q":"x"}}})",
       R"({"type":"content_block_stop","index":1})",
       R"({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}})",
       R"({"type":"message_stop"})"});
  EXPECT_EQ(seen, "#0:toolu_9:lookup:{\"z\":1,\"a\":2}#1:toolu_10:lookup:{\"q\":\"x\"}");
  ChatResult r = a.finish();
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0].arguments, R"({"z":1,"a":2})");  // the model's key order
  EXPECT_EQ(r.message.toolCalls[1].arguments, R"({"q":"x"})");
  EXPECT_EQ(r.finishReason, "tool_calls");
  // The caller goes back with the call.
  EXPECT_EQ(r.message.extra[std::string(kAnthropicContent)][0]["caller"]["tool_id"], "srvtoolu_2");
}

TEST(AnthropicReader, UnknownEventsBlocksAndDeltasAreCarriedNotFailed) {
  AnthropicAssembler a;
  feedEvents(
      a,
      {kStart, R"({"type":"message_teleported","x":1})",
       R"({"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":null}})",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary "}})",
       R"({"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"so far."}})",
       R"({"type":"content_block_stop","index":0})",
       R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})",
       R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}})",
       R"({"type":"content_block_stop","index":1})",
       R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}})",
       R"({"type":"message_stop"})"});
  ChatResult r = a.finish();
  EXPECT_EQ(r.message.content, "Hi");
  EXPECT_EQ(r.message.extra[std::string(kAnthropicContent)][0],
            json({{"type", "compaction"}, {"content", "Summary so far."}}));
  EXPECT_TRUE(serverToolCallsOf(r.message).empty());
}

TEST(AnthropicReader, RefusalCarriesTheExplanation) {
  AnthropicAssembler a;
  feedEvents(
      a,
      {kStart,
       R"({"type":"message_delta","delta":{"stop_reason":"refusal","stop_details":{"type":"refusal","explanation":"Blocked by policy."}},"usage":{"output_tokens":1}})",
       R"({"type":"message_stop"})"});
  ChatResult r = a.finish();
  EXPECT_EQ(r.finishReason, "refusal");
  EXPECT_EQ(r.message.extra["refusal"], "Blocked by policy.");
}

TEST(AnthropicReader, CapsOnBlocksAndOnWhatIsNotModelled) {
  {
    AnthropicAssembler a;
    a.addEvent(kStart);
    for (size_t i = 0; i < kMaxReplyItems; ++i) {
      a.addEvent(R"({"type":"content_block_start","index":)" + std::to_string(i) +
                 R"(,"content_block":{"type":"text","text":""}})");
    }
    EXPECT_THROW(
        a.addEvent(R"({"type":"content_block_start","index":)" + std::to_string(kMaxReplyItems) +
                   R"(,"content_block":{"type":"text","text":""}})"),
        ProtocolError);
  }
  {  // a result block over the cap, whole or grown by deltas
    const std::string big(kMaxServerToolResultBytes, 'x');
    AnthropicAssembler a;
    a.addEvent(kStart);
    EXPECT_THROW(
        a.addEvent(
            R"({"type":"content_block_start","index":0,"content_block":{"type":"web_fetch_tool_result","content":")" +
            big + R"("}})"),
        ProtocolError);
    AnthropicAssembler b;
    b.addEvent(kStart);
    b.addEvent(R"({"type":"content_block_start","index":0,"content_block":{"type":"future"}})");
    const std::string half(kMaxServerToolResultBytes / 2, 'x');
    b.addEvent(R"({"type":"content_block_delta","index":0,"delta":{"type":"d","t":")" + half +
               R"("}})");
    EXPECT_THROW(b.addEvent(R"({"type":"content_block_delta","index":0,"delta":{"type":"d","t":")" +
                            half + R"("}})"),
                 ProtocolError);
  }
}

// A reasoning model that searched the web: reasoning, the search (with its progress events),
// reasoning again, the answer.
const std::vector<std::string> kWebSearchEvents = {
    R"({"type":"response.created","response":{"id":"resp_w","model":"gpt-5","output":[]}})",
    R"({"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}})",
    R"({"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"e1"}})",
    R"({"type":"response.output_item.added","output_index":1,"item":{"id":"ws_1","type":"web_search_call","status":"in_progress"}})",
    R"({"type":"response.web_search_call.in_progress","output_index":1,"item_id":"ws_1"})",
    R"({"type":"response.web_search_call.searching","output_index":1,"item_id":"ws_1"})",
    R"({"type":"response.web_search_call.completed","output_index":1,"item_id":"ws_1"})",
    R"({"type":"response.output_item.done","output_index":1,"item":{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","query":"oslo weather"}}})",
    R"({"type":"response.output_item.added","output_index":2,"item":{"id":"rs_2","type":"reasoning","summary":[]}})",
    R"({"type":"response.output_item.done","output_index":2,"item":{"id":"rs_2","type":"reasoning","summary":[],"encrypted_content":"e2"}})",
    R"({"type":"response.output_item.added","output_index":3,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}})",
    R"({"type":"response.output_text.delta","output_index":3,"delta":"Sunny."})",
    R"({"type":"response.output_text.annotation.added","output_index":3,"annotation":{"type":"url_citation"}})",
    R"({"type":"response.output_item.done","output_index":3,"item":{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Sunny.","annotations":[{"type":"url_citation"}]}]}})",
    R"({"type":"response.completed","response":{"id":"resp_w","status":"completed","output":[],"usage":{"input_tokens":10,"output_tokens":5}}})"};

TEST(ResponsesReader, ProviderToolItemsAreKeptAndSentBackInOrder) {
  ResponsesAssembler a;
  EXPECT_EQ(feedEvents(a, kWebSearchEvents), "@0:ws_1:web_search:Sunny.");
  ChatResult r = a.finish();
  EXPECT_EQ(r.message.content, "Sunny.");
  EXPECT_TRUE(r.message.toolCalls.empty());
  EXPECT_EQ(r.finishReason, "stop");
  const std::vector<ServerToolCall> server = serverToolCallsOf(r.message);
  ASSERT_EQ(server.size(), 1u);
  EXPECT_EQ(server[0].name, "web_search");
  EXPECT_EQ(json::parse(server[0].input)["action"]["query"], "oslo weather");
  EXPECT_EQ(server[0].status, "completed");
  EXPECT_EQ(r.usage->raw["server_tool_use"]["web_search_requests"], 1);
  // The next request: each reasoning item followed by the item it led to, as OpenAI requires.
  ChatRequest request;
  request.model = "m";
  request.messages = {Message::user("Weather?"), r.message, Message::user("Thanks")};
  const json body =
      json::parse(buildResponsesBody(request, endpoint(Protocol::OpenAiResponses), false));
  std::vector<std::string> types;
  for (const json& item : body["input"])
    types.push_back(item["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"message", "reasoning", "web_search_call", "reasoning",
                                             "message", "message"}));
  EXPECT_EQ(body["input"][3]["encrypted_content"], "e2");
  EXPECT_EQ(body["input"][4]["content"][0]["annotations"][0]["type"], "url_citation");
}

TEST(ResponsesReader, ItemsParleyDoesNotModelMakeAReply) {
  ResponsesAssembler a;
  const std::string seen = feedEvents(
      a,
      {R"({"type":"response.output_item.added","output_index":0,"item":{"id":"ap_1","type":"apply_patch_call","status":"in_progress"}})",
       R"({"type":"response.apply_patch_call_operation_diff.delta","output_index":0,"delta":"+x"})",
       R"({"type":"response.output_item.done","output_index":0,"item":{"id":"ap_1","type":"apply_patch_call","call_id":"c1","status":"completed","operation":{"type":"create_file","path":"a","diff":"+x"}}})",
       R"({"type":"response.output_item.added","output_index":1,"item":{"id":"ci_1","type":"code_interpreter_call","status":"in_progress"}})",
       R"j({"type":"response.code_interpreter_call_code.delta","output_index":1,"delta":"print(1)"})j",
       R"j({"type":"response.output_item.done","output_index":1,"item":{"id":"ci_1","type":"code_interpreter_call","status":"completed","code":"print(1)","outputs":[{"type":"logs","logs":"1"}]}})j",
       R"({"type":"response.completed","response":{"status":"completed","output":[]}})"});
  EXPECT_EQ(seen, "@0:ci_1:code_interpreter:@0:::print(1)");  // the patch is not provider-run
  ChatResult r = a.finish();
  EXPECT_TRUE(hasProviderContent(r.message));
  EXPECT_NO_THROW(validate(r.message));  // no text, no client call, still a reply
  EXPECT_EQ(r.message.extra[std::string(kResponseOutput)][0]["operation"]["path"], "a");
  EXPECT_EQ(serverToolCallsOf(r.message)[0].result["outputs"][0]["logs"], "1");
}

TEST(ResponsesReader, ErrorEventsFlatOrNestedSayTheProvidersMessage) {
  for (
      const std::string& event :
      {std::string(
           R"({"type":"error","sequence_number":2,"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota.","param":null}})"),
       std::string(
           R"({"type":"error","code":"insufficient_quota","message":"You exceeded your current quota.","param":null})")}) {
    ResponsesAssembler a;
    try {
      a.addEvent(event);
      FAIL();
    } catch (const HttpError& e) {
      EXPECT_EQ(e.details().apiMessage, "You exceeded your current quota.");
      EXPECT_EQ(e.details().apiCode, "insufficient_quota");
      EXPECT_NE(std::string(e.what()).find("You exceeded your current quota."), std::string::npos);
    }
  }
}

TEST(ResponsesReader, CapOnItemsPerReply) {
  ResponsesAssembler a;
  for (size_t i = 0; i < kMaxReplyItems; ++i) {
    a.addEvent(R"({"type":"response.output_item.added","output_index":)" + std::to_string(i) +
               R"(,"item":{"type":"web_search_call","id":"w"}})");
  }
  EXPECT_THROW(a.addEvent(R"({"type":"response.output_item.added","output_index":)" +
                          std::to_string(kMaxReplyItems) +
                          R"(,"item":{"type":"web_search_call","id":"w"}})"),
               ProtocolError);
  ResponsesAssembler b;
  b.addEvent(
      R"({"type":"response.output_item.added","output_index":0,"item":{"type":"image_generation_call","id":"ig"}})");
  EXPECT_THROW(
      b.addEvent(
          R"({"type":"response.output_item.done","output_index":0,"item":{"type":"image_generation_call","id":"ig","result":")" +
          std::string(kMaxServerToolResultBytes, 'A') + R"("}})"),
      ProtocolError);
}

TEST(ChatCompletionsReader, ContentAsAnArrayOfPartsIsReadWhereverAStringIs) {
  // Mistral's magistral streams its thinking and its answer as parts.
  StreamAssembler a;
  a.addChunk(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"2+2"}]}]}}]})");
  const StreamDelta& d = a.addChunk(
      R"({"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"2 + 2 = 4"}]},"finish_reason":"stop"}]})");
  EXPECT_EQ(d.content, "2 + 2 = 4");
  ChatResult streamed = a.finish();
  EXPECT_EQ(streamed.message.content, "2 + 2 = 4");
  EXPECT_EQ(streamed.message.extra["reasoning_content"], "2+2");
  ChatResult whole = resultFromCompletion(
      R"({"object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"2+2"}]},{"type":"text","text":"2 + 2 = 4"}]}}]})");
  EXPECT_EQ(whole.message.content, "2 + 2 = 4");
  EXPECT_EQ(whole.message.extra["reasoning_content"], "2+2");
}

TEST(ChatCompletionsReader, AFlatErrorChunkSaysTheProvidersMessage) {
  StreamAssembler a;
  try {
    a.addChunk(R"({"type":"error","message":"Model overloaded","code":"overloaded"})");
    FAIL();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.details().apiMessage, "Model overloaded");
  }
}

// A transcript of one tool round after a reply that carried every provider's fields.
std::vector<Message> transcript() {
  Message assistant = Message::assistant(
      "Checking.", {ToolCall{"call_1", "get_weather", R"({"city": "Oslo", "a": 1})"}});
  assistant.extra["thinking_blocks"] =
      json::parse(R"([{"type":"thinking","thinking":"t","signature":"sig"}])");
  assistant.extra["reasoning_items"] =
      json::parse(R"([{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"enc"}])");
  assistant.extra["response_item_ids"] = json{{"call_1", "fc_1"}, {"message", "msg_1"}};
  assistant.extra["reasoning_content"] = "t";
  assistant.extra["reasoning_details"] = json::parse(R"([{"type":"reasoning.text","text":"t"}])");
  return {Message::system("Be terse."), Message::user("Weather in Oslo?"), assistant,
          Message::tool("call_1", "-3C"), Message::user("And tomorrow?")};
}

ChatRequest requestOf(std::vector<Message> messages) {
  ChatRequest r;
  r.model = "m";
  r.messages = std::move(messages);
  r.tools = json::parse(
      R"([{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  return r;
}

ClientOptions endpoint(Protocol protocol, std::string baseUrl) {
  ClientOptions o;
  o.protocol = protocol;
  o.baseUrl = std::move(baseUrl);
  return o;
}

TEST(AnthropicWriter, RolesToolsAndThinkingAsTheApiWantsThem) {
  ClientOptions o = endpoint(Protocol::Anthropic);
  o.promptCache.mode = PromptCachePolicy::Mode::Off;
  const json body = json::parse(buildAnthropicBody(requestOf(transcript()), o, true));
  EXPECT_EQ(body["system"], json::parse(R"([{"type":"text","text":"Be terse."}])"));
  EXPECT_EQ(body["max_tokens"], 4096);  // ClientOptions::defaultMaxTokens
  EXPECT_EQ(body["stream"], true);
  ASSERT_EQ(body["messages"].size(), 3u);  // user, assistant, user (tool result + text merged)
  const json& assistant = body["messages"][1];
  EXPECT_EQ(assistant["content"][0],
            json::parse(R"({"type":"thinking","thinking":"t","signature":"sig"})"));
  EXPECT_EQ(assistant["content"][1], json::parse(R"({"type":"text","text":"Checking."})"));
  EXPECT_EQ(assistant["content"][2]["type"], "tool_use");
  EXPECT_EQ(assistant["content"][2]["input"], json::parse(R"({"city":"Oslo","a":1})"));
  const json& user = body["messages"][2];
  EXPECT_EQ(user["role"], "user");
  EXPECT_EQ(user["content"][0],
            json::parse(R"({"type":"tool_result","tool_use_id":"call_1","content":"-3C"})"));
  EXPECT_EQ(user["content"][1]["text"], "And tomorrow?");
  EXPECT_EQ(body["tools"][0]["name"], "get_weather");
  EXPECT_EQ(body["tools"][0]["input_schema"]["type"], "object");
  // Only what the API knows: no provider field of another protocol travels.
  const std::string text = body.dump();
  for (const char* foreign : {"reasoning_items", "encrypted_content", "reasoning_content",
                              "reasoning_details", "response_item_ids"})
    EXPECT_EQ(text.find(foreign), std::string::npos) << foreign;
}

TEST(AnthropicWriter, SameHistorySameBytesWhicheverWayItComes) {
  ClientOptions o = endpoint(Protocol::Anthropic);
  ChatRequest plain = requestOf(transcript());
  ChatRequest encoded = requestOf({});
  for (const Message& m : transcript())
    encoded.encodedMessages.push_back(std::make_shared<const std::string>(encodeMessage(m)));
  const std::string a = buildAnthropicBody(plain, o, true);
  EXPECT_EQ(a, buildAnthropicBody(plain, o, true));
  EXPECT_EQ(a, buildAnthropicBody(encoded, o, true));
  // The arguments' keys in the order the model wrote them.
  EXPECT_NE(a.find(R"("input":{"city":"Oslo","a":1})"), std::string::npos) << a;
}

int breakpoints(const json& body) {
  int n = 0;
  const std::string text = body.dump();
  for (size_t at = text.find("cache_control"); at != std::string::npos;
       at = text.find("cache_control", at + 1))
    ++n;
  return n;
}

TEST(AnthropicWriter, CacheBreakpointsStayWithinTheLimitOfFour) {
  std::vector<Message> many = {Message::system("sys")};
  for (int i = 0; i < 6; ++i) {
    many.push_back(Message::user("u" + std::to_string(i)));
    many.push_back(Message::assistant("a" + std::to_string(i)));
  }
  many.push_back(Message::user("last"));
  ClientOptions o = endpoint(Protocol::Anthropic);
  o.promptCache.ttl = "1h";
  for (int turns : {0, 1, 2, 3, 10}) {
    o.promptCache.lastUserTurns = turns;
    const json body = json::parse(buildAnthropicBody(requestOf(many), o, false));
    EXPECT_EQ(breakpoints(body), std::min(2 + turns, kMaxCacheBreakpoints)) << turns;
    EXPECT_EQ(body["tools"].back()["cache_control"],
              json::parse(R"({"type":"ephemeral","ttl":"1h"})"));
    EXPECT_TRUE(body["system"].back().contains("cache_control"));
    if (turns > 0) {
      EXPECT_TRUE(body["messages"].back()["content"].back().contains("cache_control"));
    }
  }
  o.promptCache.mode = PromptCachePolicy::Mode::Off;
  EXPECT_EQ(breakpoints(json::parse(buildAnthropicBody(requestOf(many), o, false))), 0);

  o.promptCache.mode = PromptCachePolicy::Mode::Explicit;
  for (size_t i = 1; i <= 4; ++i)
    many[2 * i - 1].extra["cache_control"] = true;
  const json four = json::parse(buildAnthropicBody(requestOf(many), o, false));
  EXPECT_EQ(breakpoints(four), 4);
  EXPECT_TRUE(four["messages"][0]["content"].back().contains("cache_control"));
  many[9].extra["cache_control"] = true;  // a fifth
  try {
    buildAnthropicBody(requestOf(many), o, false);
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 4"), std::string::npos) << e.what();
  }
}

TEST(AnthropicWriter, UnsendableRequestsNameTheField) {
  ClientOptions o = endpoint(Protocol::Anthropic);
  ChatRequest onlySystem = requestOf({Message::system("s")});
  EXPECT_THROW(buildAnthropicBody(onlySystem, o, false), ValidationError);
  ChatRequest badArgs =
      requestOf({Message::user("u"), Message::assistant("", {ToolCall{"c", "f", "[1]"}})});
  EXPECT_THROW(buildAnthropicBody(badArgs, o, false), ValidationError);
  ChatRequest format = requestOf({Message::user("u")});
  format.responseFormat = ResponseFormat::jsonObject();
  EXPECT_THROW(buildAnthropicBody(format, o, false), ValidationError);
}

TEST(ResponsesWriter, ItemsReasoningAndStatelessDefaults) {
  ClientOptions o = endpoint(Protocol::OpenAiResponses);
  o.promptCacheKey = "user-42";
  ChatRequest request = requestOf(transcript());
  request.maxTokens = 100;
  const std::string text = buildResponsesBody(request, o, true);
  const json body = json::parse(text);
  EXPECT_EQ(body["instructions"], "Be terse.");
  EXPECT_EQ(body["store"], false);
  EXPECT_EQ(body["include"], json::array({"reasoning.encrypted_content"}));
  EXPECT_EQ(body["prompt_cache_key"], "user-42");
  EXPECT_EQ(body["max_output_tokens"], 100);
  EXPECT_EQ(body["tools"][0]["name"], "get_weather");
  EXPECT_EQ(body["tools"][0]["type"], "function");
  const json& input = body["input"];
  ASSERT_EQ(input.size(), 6u);
  EXPECT_EQ(input[0]["role"], "user");
  EXPECT_EQ(
      input[1],
      json::parse(R"({"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"enc"})"));
  EXPECT_EQ(input[2]["type"], "message");
  EXPECT_EQ(input[2]["id"], "msg_1");
  EXPECT_EQ(input[3]["type"], "function_call");
  EXPECT_EQ(input[3]["call_id"], "call_1");
  EXPECT_EQ(input[3]["id"], "fc_1");
  EXPECT_EQ(input[3]["arguments"], R"({"city": "Oslo", "a": 1})");  // exactly as written
  EXPECT_EQ(input[4],
            json::parse(R"({"type":"function_call_output","call_id":"call_1","output":"-3C"})"));
  EXPECT_EQ(input[5]["content"], "And tomorrow?");
  for (const char* foreign : {"thinking_blocks", "\"signature\"", "reasoning_details"})
    EXPECT_EQ(text.find(foreign), std::string::npos) << foreign;
  EXPECT_EQ(text, buildResponsesBody(request, o, true));  // byte-stable

  o.responsesStore = true;
  const json stored = json::parse(buildResponsesBody(request, o, false));
  EXPECT_EQ(stored["store"], true);
  EXPECT_FALSE(stored.contains("include"));
  EXPECT_FALSE(stored.contains("stream"));
  ChatRequest stop = requestOf({Message::user("u")});
  stop.stop = {"END"};
  EXPECT_THROW(buildResponsesBody(stop, o, false), ValidationError);
}

// One test per rule of the provider-field table (provider_fields.cpp).
TEST(ProviderFields, EachRuleSendsItsFieldOnlyWhereItBelongs) {
  const ClientOptions chat = endpoint(Protocol::OpenAiChat);
  const ClientOptions deepseek = endpoint(Protocol::OpenAiChat, "https://api.deepseek.com/v1");
  const ClientOptions responses = endpoint(Protocol::OpenAiResponses);
  const ClientOptions anthropic = endpoint(Protocol::Anthropic);
  const ClientOptions gemini = endpoint(Protocol::Gemini);
  struct Expect {
    std::string_view key;
    bool chat, deepseek, responses, anthropic, gemini;
  };
  const Expect expected[] = {
      {kReasoningContent, true, false, false, false, false},
      {kReasoningDetails, true, true, false, false, false},
      {kThinkingBlocks, false, false, false, true, false},
      {kReasoningItems, false, false, true, false, false},
      {kResponseItemIds, false, false, true, false, false},
      {kCacheControl, false, false, false, true, false},
      {kAnthropicContent, false, false, false, true, false},
      {kResponseOutput, false, false, true, false, false},
      {kGeminiParts, false, false, false, false, true},
      {kStopDetails, false, false, false, false, false},
      {kGeminiMetadata, false, false, false, false, false},
  };
  ASSERT_EQ(providerFieldRules().size(), std::size(expected));
  for (const Expect& e : expected) {
    SCOPED_TRACE(std::string(e.key));
    EXPECT_EQ(sendsField(e.key, chat), e.chat);
    EXPECT_EQ(sendsField(e.key, deepseek), e.deepseek);
    EXPECT_EQ(sendsField(e.key, responses), e.responses);
    EXPECT_EQ(sendsField(e.key, anthropic), e.anthropic);
    EXPECT_EQ(sendsField(e.key, gemini), e.gemini);
  }
  for (const ProviderFieldRule& rule : providerFieldRules())
    EXPECT_EQ(rule.docs.rfind("https://", 0), 0u) << rule.key;
}

TEST(ProviderFields, ChatRequestsLeaveOutWhatTheEndpointRefuses) {
  std::vector<Message> messages = transcript();
  messages[2].extra["anthropic_content"] = json::parse(R"([{"type":"text","text":"Checking."}])");
  messages[2].extra["response_output"] = json::parse(R"([{"type":"web_search_call","id":"ws"}])");
  messages[2].extra["stop_details"] = json::parse(R"({"type":"refusal"})");
  ChatRequest plain = requestOf(messages);
  ChatRequest encoded = requestOf({});
  for (const Message& m : messages)
    encoded.encodedMessages.push_back(std::make_shared<const std::string>(encodeMessage(m)));
  for (const ChatRequest* request : {&plain, &encoded}) {
    const json body =
        json::parse(buildRequestBody(*request, endpoint(Protocol::OpenAiChat), false));
    const json& assistant = body["messages"][2];
    EXPECT_EQ(assistant["reasoning_content"], "t");
    EXPECT_TRUE(assistant.contains("reasoning_details"));
    for (const char* foreign : {"thinking_blocks", "reasoning_items", "response_item_ids",
                                "anthropic_content", "response_output", "stop_details"})
      EXPECT_FALSE(assistant.contains(foreign)) << foreign;
    EXPECT_EQ(assistant["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo", "a": 1})");
    // DeepSeek answers 400 to reasoning_content in input messages.
    const json toDeepSeek = json::parse(buildRequestBody(
        *request, endpoint(Protocol::OpenAiChat, "https://api.deepseek.com"), false));
    EXPECT_FALSE(toDeepSeek["messages"][2].contains("reasoning_content"));
  }
}

TEST(Protocol, NamesAndClients) {
  for (Protocol p : {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic})
    EXPECT_EQ(protocolFromString(toString(p)), p);
  EXPECT_THROW(protocolFromString("smoke-signals"), ValidationError);
  ClientOptions o = endpoint(Protocol::Anthropic);
  o.defaultMaxTokens = 0;
  EXPECT_THROW(makeClient(o), ValidationError);
  o.protocol = Protocol::OpenAiResponses;
  EXPECT_NE(makeClient(o), nullptr);
}

}  // namespace
}  // namespace parley::detail
