#include "parley/message.hpp"

#include <gtest/gtest.h>

#include "parley/errors.hpp"
#include "parley/iso_time.hpp"
#include "parley/llm.hpp"
#include "printers.hpp"

namespace parley {
namespace {

std::string fieldOf(const json& value) {
  try {
    messageFromJson(value);
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "<no error>";
}

TEST(Role, NamesRoundTrip) {
  for (Role role : kAllRoles)
    EXPECT_EQ(roleFromString(toString(role)), role);
  EXPECT_EQ(parseRole("developer"), Role::System);
  EXPECT_FALSE(parseRole("robot"));
  EXPECT_THROW(roleFromString("robot"), ValidationError);
}

TEST(MessageJson, ReadsPlainMessages) {
  Message m = messageFromJson(json::parse(R"({"role":"user","content":"hi","name":"ann"})"));
  EXPECT_EQ(m.role, Role::User);
  EXPECT_EQ(m.content, "hi");
  EXPECT_EQ(m.name, "ann");
  EXPECT_TRUE(m.extra.empty());
}

TEST(MessageJson, ToolCallContentNullOrAbsentIsEmpty) {
  const char* calls = R"([{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}])";
  for (const char* content : {R"("content":null,)", R"()", R"("content":"",)"}) {
    json value = json::parse(std::string(R"({"role":"assistant",)") + content + R"("tool_calls":)" +
                             calls + "}");
    Message m = messageFromJson(value);
    EXPECT_EQ(m.content, "");
    ASSERT_EQ(m.toolCalls.size(), 1u);
    EXPECT_EQ(m.toolCalls[0], (ToolCall{"c1", "f", "{}"}));
  }
}

TEST(MessageJson, UnknownFieldsAreKeptAndWrittenBack) {
  json value =
      json::parse(R"({"role":"assistant","content":"4","reasoning_content":"2+2","refusal":null})");
  Message m = messageFromJson(value);
  EXPECT_EQ(m.extra["reasoning_content"], "2+2");
  json back = toJson(m);
  EXPECT_EQ(back, value);
}

TEST(MessageJson, RoundTripsEveryShape) {
  std::vector<json> samples = {
      json::parse(R"({"role":"system","content":"be brief"})"),
      json::parse(R"({"role":"user","content":"hi","name":"bob"})"),
      json::parse(R"({"role":"assistant","content":null,"tool_calls":[
          {"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},
          {"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]})"),
      json::parse(R"({"role":"assistant","content":"let me check","tool_calls":[
          {"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]})"),
      json::parse(R"({"role":"tool","content":"{\"t\":3}","tool_call_id":"a"})"),
      json::parse(R"({"role":"user","content":[{"type":"text","text":"what is "},
          {"type":"image_url","image_url":{"url":"data:x"}},{"type":"text","text":"this"}]})"),
  };
  for (const json& sample : samples) {
    Message m = messageFromJson(sample);
    EXPECT_EQ(toJson(m), sample) << sample.dump();
    EXPECT_EQ(messageFromJson(toJson(m)), m);
  }
  EXPECT_EQ(messageFromJson(samples.back()).content, "what is this");
}

TEST(MessageJson, UsageIsKeptOnTheMessage) {
  json value = json::parse(
      R"({"role":"assistant","content":"4","usage":{"prompt_tokens":9,"completion_tokens":1,
          "total_tokens":10,"prompt_tokens_details":{"cached_tokens":8}}})");
  Message m = messageFromJson(value);
  ASSERT_TRUE(m.usage.has_value());
  EXPECT_EQ(m.usage->promptTokens, 9);
  EXPECT_EQ(m.usage->totalTokens, 10);
  EXPECT_FALSE(m.extra.contains("usage"));
  EXPECT_EQ(toJson(m), value);  // the raw object, details included
  Message without = m;
  without.usage.reset();
  EXPECT_NE(without, m);
  EXPECT_FALSE(toJson(without).contains("usage"));
  try {
    messageFromJson(json::parse(R"({"role":"assistant","content":"4","usage":7})"));
    FAIL() << "a non-object usage was accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "message.usage");
  }
}

TEST(MessageJson, ReplyModelAndTimeAreKeptOnTheMessage) {
  const json value = json::parse(
      R"({"role":"assistant","content":"4","model":"gpt-4o-mini","received_at":"2026-11-20T09:30:05.250Z"})");
  Message m = messageFromJson(value);
  EXPECT_EQ(m.model, "gpt-4o-mini");
  ASSERT_TRUE(m.receivedAt.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(m.receivedAt->time_since_epoch())
                .count(),
            1795167005250);
  EXPECT_TRUE(m.extra.empty());
  EXPECT_EQ(toJson(m), value);
  // Never part of what a model is sent.
  EXPECT_EQ(json::parse(encodeMessage(m)), json::parse(R"({"role":"assistant","content":"4"})"));
  for (const char* bad :
       {R"({"role":"assistant","content":"4","received_at":"yesterday"})",
        R"({"role":"assistant","content":"4","received_at":"2026-13-01T00:00:00Z"})",
        R"({"role":"assistant","content":"4","received_at":5})"}) {
    try {
      messageFromJson(json::parse(bad));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), "message.received_at") << bad;
    }
  }
  try {
    messageFromJson(json::parse(R"({"role":"assistant","content":"4","model":["x"]})"));
    ADD_FAILURE() << "a non-string model was accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "message.model");
  }
}

TEST(IsoTime, WritesAndReadsMillisecondsInUtc) {
  using namespace std::chrono;
  const system_clock::time_point at{milliseconds(1795167005250)};
  EXPECT_EQ(isoTime(at), "2026-11-20T09:30:05.250Z");
  EXPECT_EQ(parseIsoTime("2026-11-20T09:30:05.250Z"), at);
  EXPECT_EQ(parseIsoTime("2026-11-20T09:30:05.250999Z"), at);
  EXPECT_EQ(parseIsoTime("2026-11-20T09:30:05Z"), system_clock::time_point{seconds(1795167005)});
  EXPECT_EQ(parseIsoTime("2026-11-20"), system_clock::time_point{seconds(1795132800)});
  EXPECT_EQ(isoTime(system_clock::time_point{milliseconds(-1)}), "1969-12-31T23:59:59.999Z");
  for (const char* bad :
       {"", "2026-11-20T09:30:05", "2026-02-30", "2026-11-20T24:00:00Z", "2026-11-20T09:30:05.Z",
        "2026-11-20T09:30:05+01:00", "20261120", "2999-01-01"}) {
    EXPECT_FALSE(parseIsoTime(bad).has_value()) << bad;
  }
}

TEST(MessageJson, EmptyToolCallContentFollowsTheEndpointOption) {
  Message m = Message::assistant("", {{"c1", "f", ""}});
  EXPECT_TRUE(toJson(m)["content"].is_null());
  EXPECT_EQ(toJson(m, {EmptyContent::EmptyString})["content"], "");
  EXPECT_FALSE(toJson(m, {EmptyContent::Omit}).contains("content"));
  EXPECT_EQ(toJson(m)["tool_calls"][0]["function"]["arguments"], "{}");
}

TEST(MessageJson, ArgumentsGivenAsObjectAreKeptAsText) {
  Message m = messageFromJson(json::parse(
      R"({"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{"x":1}}}]})"));
  EXPECT_EQ(m.toolCalls[0].arguments, R"({"x":1})");
}

TEST(MessageValidation, ErrorsNameTheField) {
  EXPECT_EQ(fieldOf(json::parse(R"([1])")), "message");
  EXPECT_EQ(fieldOf(json::parse(R"({"content":"x"})")), "message.role");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"robot","content":"x"})")), "message.role");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":7,"content":"x"})")), "message.role");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"user"})")), "message.content");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"user","content":""})")), "message.content");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"assistant","content":null})")), "message.content");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"user","content":5})")), "message.content");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"tool","content":"r"})")), "message.tool_call_id");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"user","content":"r","tool_call_id":"x"})")),
            "message.tool_call_id");
  EXPECT_EQ(
      fieldOf(json::parse(
          R"({"role":"user","content":"x","tool_calls":[{"id":"a","function":{"name":"f"}}]})")),
      "message.tool_calls");
  EXPECT_EQ(fieldOf(json::parse(
                R"({"role":"assistant","tool_calls":[{"id":"","function":{"name":"f"}}]})")),
            "message.tool_calls[0].id");
  EXPECT_EQ(fieldOf(json::parse(
                R"({"role":"assistant","tool_calls":[{"id":"a","function":{"name":""}}]})")),
            "message.tool_calls[0].function.name");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"assistant","tool_calls":[
                {"id":"a","function":{"name":"f"}},{"id":"a","function":{"name":"g"}}]})")),
            "message.tool_calls[1].id");
  EXPECT_EQ(fieldOf(json::parse(R"({"role":"assistant","tool_calls":[{"id":"a"}]})")),
            "message.tool_calls[0].function");
  EXPECT_EQ(
      fieldOf(json::parse(
          R"({"role":"assistant","tool_calls":[{"id":"a","type":"x","function":{"name":"f"}}]})")),
      "message.tool_calls[0].type");
}

TEST(MessageValidation, ExtraMayNotShadowModelledFields) {
  Message m = Message::user("hi");
  m.extra["role"] = "system";
  EXPECT_THROW(validate(m), ValidationError);
  m.extra = json::array();
  EXPECT_THROW(validate(m), ValidationError);
}

TEST(MessageValidation, ListErrorsCarryTheIndex) {
  json list = json::parse(R"([{"role":"user","content":"a"},{"role":"tool","content":"b"}])");
  try {
    messagesFromJson(list);
    FAIL() << "expected a ValidationError";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "messages[1].tool_call_id");
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_call_id:"), std::string::npos);
  }
}

}  // namespace
}  // namespace parley
