// Structured output (docs/structured-output.md): the partial JSON reader at every split point
// and against bad input, the concise schema form, and runStructured / runAs<T> against the mock
// over each protocol: each rung of the ladder as the request carries it, the automatic fallback
// on a refusal, the repair loop succeeding and giving up, partial answers while streaming, caps.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "mock_fixture.hpp"
#include "model/partial_json.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/structured_output.hpp"

namespace parley {
namespace {

using nlohmann::json;

// `partial` is what a reader may show of `full` so far: every key it has is in `full` with a
// consistent value, strings are prefixes, arrays are no longer, scalars are equal.
bool consistent(const json& partial, const json& full) {
  if (partial.is_null()) return true;
  if (partial.is_object()) {
    if (!full.is_object()) return false;
    for (const auto& [key, value] : partial.items())
      if (!full.contains(key) || !consistent(value, full[key])) return false;
    return true;
  }
  if (partial.is_array()) {
    if (!full.is_array() || partial.size() > full.size()) return false;
    for (size_t i = 0; i < partial.size(); ++i)
      if (!consistent(partial[i], full[i])) return false;
    return true;
  }
  if (partial.is_string()) {
    return full.is_string() && full.get<std::string>().rfind(partial.get<std::string>(), 0) == 0;
  }
  return partial == full;
}

const std::string kAnswer =
    R"({"name": "Ad\u00e9 \"the\" \\ first", "emoji": "\ud83d\ude00 ok", "city": "Zürich",)"
    R"( "age": 36, "ratio": -1.5e3, "tags": ["a", "bé", [], {}], "nested": {"ok": true,)"
    R"( "none": null, "no": false, "deep": [[1, 2], {"k": "v"}]}, "last": 0})";

TEST(PartialJson, EveryPrefixFedByteByByteIsConsistentAndGrows) {
  const json full = json::parse(kAnswer);
  PartialJson reader;
  json previous;
  int changes = 0;
  for (size_t i = 0; i < kAnswer.size(); ++i) {
    const bool changed = reader.append(std::string_view(kAnswer).substr(i, 1));
    const json now = reader.current();
    ASSERT_TRUE(consistent(now, full)) << "after byte " << i << ": " << now.dump();
    ASSERT_TRUE(consistent(previous, now))
        << "after byte " << i << ": " << previous.dump() << " is not part of " << now.dump();
    if (!changed) {
      ASSERT_EQ(now, previous) << "after byte " << i << " with no change said";
    }
    changes += changed ? 1 : 0;
    previous = now;
  }
  EXPECT_TRUE(reader.complete());
  EXPECT_EQ(reader.current(), full);
  EXPECT_GT(changes, 50);
}

TEST(PartialJson, EverySplitInTwoGivesTheWholeValue) {
  const json full = json::parse(kAnswer);
  for (size_t k = 0; k <= kAnswer.size(); ++k) {
    PartialJson reader;
    reader.append(std::string_view(kAnswer).substr(0, k));
    ASSERT_TRUE(consistent(reader.current(), full)) << "split at " << k;
    reader.append(std::string_view(kAnswer).substr(k));
    ASSERT_EQ(reader.current(), full) << "split at " << k;
  }
}

TEST(PartialJson, ClosesWhatIsOpenAndDropsWhatCannotBeShown) {
  const auto closed = [](std::string_view text) {
    PartialJson reader;
    reader.append(text);
    return reader.current();
  };
  EXPECT_EQ(closed(""), json());
  EXPECT_EQ(closed("  "), json());
  EXPECT_EQ(closed("{"), json::object());
  EXPECT_EQ(closed(R"({"a": "x)"), json({{"a", "x"}}));
  EXPECT_EQ(closed(R"({"a": 1, "b)"), json({{"a", 1}}));     // a key without a value
  EXPECT_EQ(closed(R"({"a": 1, "b": )"), json({{"a", 1}}));  // still without a value
  EXPECT_EQ(closed(R"({"a": 12)"), json::object());          // the number may go on
  EXPECT_EQ(closed(R"({"a": tr)"), json::object());          // a literal not yet ended
  EXPECT_EQ(closed(R"([1, 2)"), json::array({1}));
  EXPECT_EQ(closed(R"([1, [2, {"c": ["d)"), json::parse(R"([1, [2, {"c": ["d"]}]])"));
  EXPECT_EQ(closed(R"({"a": "x\)"), json({{"a", "x"}}));     // a cut escape
  EXPECT_EQ(closed(R"({"a": "x\u00)"), json({{"a", "x"}}));  // a cut \u escape
  EXPECT_EQ(closed(R"({"a": "\ud83d)"), json({{"a", ""}}));  // half a surrogate pair
  EXPECT_EQ(closed("{\"a\": \"\xc3"), json({{"a", ""}}));    // half a UTF-8 character
}

TEST(PartialJson, BadInputIsAProtocolErrorAndTheReaderStaysBroken) {
  for (std::string_view bad :
       {"{]", R"({"a" 1})", R"(Sure! {"a": 1})", R"({"a": 1}})", R"({"a": 1} x)", R"(["\x"])",
        "[\"\xff\"]", R"([01])", R"([1.])", R"({"a": nul1})", R"({,})", R"([1,,2])", R"("\udc00")",
        "[\"a\nb\"]"}) {
    PartialJson reader;
    EXPECT_THROW(reader.append(bad), ProtocolError) << bad;
    EXPECT_THROW(reader.append("1"), ProtocolError) << bad;
  }
}

TEST(PartialJson, CapsOnDepthAndSize) {
  PartialJson shallow(PartialJsonLimits{1024, 4});
  EXPECT_NO_THROW(shallow.append("[[[["));
  try {
    shallow.append("[");
    FAIL() << "a fifth level was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("cap of 4"), std::string::npos) << e.what();
  }
  PartialJson small(PartialJsonLimits{16, 64});
  EXPECT_NO_THROW(small.append(R"({"a": "0123)"));
  EXPECT_THROW(small.append("456789"), ProtocolError);
}

TEST(ConciseSchema, FieldsTypesAndDescriptions) {
  EXPECT_EQ(conciseSchema("name, age int, bio: a short bio"), json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "bio": {"type": "string", "description": "a short bio"}},
    "required": ["name", "age", "bio"], "additionalProperties": false})"));
  EXPECT_EQ(conciseSchema("score float: 0 to 1, ok bool")["properties"],
            json::parse(R"({"score": {"type": "number", "description": "0 to 1"},
                            "ok": {"type": "boolean"}})"));
  EXPECT_EQ(parseSchemaText(R"( {"type": "object"} )"), json({{"type", "object"}}));
  try {
    conciseSchema("name, age integer");
    FAIL();
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "schema.fields[1]");
    EXPECT_NE(e.reason().find("\"integer\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(conciseSchema(""), ValidationError);
  EXPECT_THROW(conciseSchema("a,,b"), ValidationError);
  EXPECT_THROW(conciseSchema("a, a"), ValidationError);
  EXPECT_THROW(conciseSchema("na me"), ValidationError);  // "me" is not a type
  EXPECT_THROW(parseSchemaText("{not json"), ValidationError);
}

TEST(StructuredOutputErrorJson, RoundTrips) {
  StructuredOutputError::Details d;
  d.path = "age";
  d.messages = {"age: expected type integer, got string", "name: missing"};
  d.rung = "json_schema";
  d.attempts = 3;
  d.reply = R"({"age": "x"})";
  const json document = errorToJson(StructuredOutputError(d));
  EXPECT_EQ(document["kind"], "structured_output");
  EXPECT_EQ(document["path"], "age");
  try {
    rethrowFromJson(document);
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.path(), "age");
    EXPECT_EQ(e.messages(), d.messages);
    EXPECT_EQ(e.details().attempts, 3);
    EXPECT_EQ(e.details().rung, "json_schema");
    EXPECT_EQ(e.details().reply, d.reply);
    EXPECT_EQ(e.kind(), ErrorKind::StructuredOutput);
    return;
  }
  FAIL() << "not a StructuredOutputError";
}

TEST(MockScript, MatchesTheResponseFormatAndTheForcedTool) {
  try {
    mock::compileScript(
        json::parse(R"([{"match": {"response_format": "xml"}, "reply": {"content": "x"}}])"));
    FAIL() << "an unknown response_format was accepted";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "rule 1: match.response_format");
  }
  const mock::Script script = mock::compileScript(json::parse(
      R"([{"match": {"response_format": "json_object", "tool_choice": "none"}, "reply": {"content": "{{response_format}} {{tool_choice}}"}}])"));
  const json plain = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  json formatted = plain;
  formatted["response_format"] = {{"type", "json_object"}};
  json forced = formatted;
  forced["tool_choice"] = {{"type", "function"}, {"function", {{"name", "answer"}}}};
  std::vector<std::string> groups;
  EXPECT_FALSE(mock::matches(script[0].match, mock::describeRequest(plain, 1), groups));
  const mock::ChatContext ctx = mock::describeRequest(formatted, 1);
  EXPECT_TRUE(mock::matches(script[0].match, ctx, groups));
  EXPECT_EQ(mock::expandTemplate("{{response_format}} {{tool_choice}}", ctx, groups),
            "json_object none");
  EXPECT_FALSE(mock::matches(script[0].match, mock::describeRequest(forced, 1), groups));
  EXPECT_EQ(mock::describeRequest(forced, 1).forcedTool, "answer");
}

// --- against the mock ----------------------------------------------------------------------

const json kPersonSchema = json::parse(R"({"type": "object",
  "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
  "required": ["name", "age"], "additionalProperties": false})");

struct Person {
  std::string name;
  int age = 0;
  static json jsonSchema() { return kPersonSchema; }
};
void from_json(const json& j, Person& p) {
  j.at("name").get_to(p.name);
  j.at("age").get_to(p.age);
}

// A type whose schema is given by the trait and asks for less than from_json reads.
struct Loose {
  std::string name;
  int age = 0;
};
void from_json(const json& j, Loose& p) {
  j.at("name").get_to(p.name);
  j.at("age").get_to(p.age);
}

}  // namespace

template <>
struct JsonSchemaOf<Loose> {
  static json schema() {
    return json::parse(R"({"type": "object", "properties": {"name": {"type": "string"}}})");
  }
};

namespace {

class Structured : public ::testing::Test {
 protected:
  void startMock(const std::string& script) { server_ = testing::startMockServer(script); }

  ConversationOptions options(Protocol protocol = Protocol::OpenAiChat,
                              StructuredOutputMode mode = StructuredOutputMode::Auto) {
    ClientOptions client = testing::mockClientOptions(*server_, "gpt-4o-mini");
    client.protocol = protocol;
    client.structuredOutput = mode;
    ConversationOptions o;
    o.llm = makeClient(client);  // a client of its own: refusals are remembered per client
    o.systemPrompt = "You are terse.";
    return o;
  }

  json body(size_t i) const { return server_->requests().at(i)["body"]; }

  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(Structured, JsonSchemaRungSendsAStrictResponseFormat) {
  startMock(
      R"({"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}})");
  ConversationManager c(options());
  std::vector<StructuredAttempt> attempts;
  StructuredOptions so;
  so.onAttempt = [&](const StructuredAttempt& a) { attempts.push_back(a); };
  const StructuredResult r = c.runStructuredResult("Who?", kPersonSchema, so);
  EXPECT_EQ(r.value, json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(r.rung, StructuredOutputMode::JsonSchema);
  EXPECT_EQ(r.attempts, 1);
  const json format = body(0)["response_format"];
  EXPECT_EQ(format["type"], "json_schema");
  EXPECT_EQ(format["json_schema"]["name"], "answer");
  EXPECT_EQ(format["json_schema"]["strict"], true);
  EXPECT_EQ(format["json_schema"]["schema"], kPersonSchema);
  EXPECT_FALSE(body(0).contains("tools"));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_TRUE(attempts[0].valid);
  EXPECT_EQ(attempts[0].rung, StructuredOutputMode::JsonSchema);
  const auto view = c.getMessages();
  ASSERT_EQ(view.size(), 3u);
  EXPECT_EQ(view[1], Message::user("Who?"));
  EXPECT_EQ(json::parse(view[2].content), r.value);
}

TEST_F(Structured, JsonObjectRungPutsTheSchemaInASystemMessage) {
  startMock(
      R"({"match": {"response_format": "json_object"}, "reply": {"content": "```json\n{\"name\": \"Ada\", \"age\": 36}\n```"}})");
  ConversationManager c(options(Protocol::OpenAiChat, StructuredOutputMode::JsonObject));
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema), json({{"name", "Ada"}, {"age", 36}}));
  const json messages = body(0)["messages"];
  ASSERT_GE(messages.size(), 3u);
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_NE(messages[0]["content"].get<std::string>().find(kPersonSchema.dump()),
            std::string::npos);
  EXPECT_EQ(messages.back()["content"], "Who?");
  // The instruction is sent, not stored.
  EXPECT_EQ(c.getMessages().size(), 3u);
  EXPECT_EQ(c.getMessages()[0], Message::system("You are terse."));
}

TEST_F(Structured, ToolRungForcesASyntheticToolAndStoresNoToolCall) {
  startMock(
      R"({"match": {"tool_choice": "person"}, "reply": {"tool_calls": [{"name": "person", "arguments": {"name": "Ada", "age": 36}}]}})");
  ConversationManager c(options(Protocol::OpenAiChat, StructuredOutputMode::Tool));
  StructuredOptions so;
  so.name = "person";
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema, so), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(body(0)["tool_choice"],
            json::parse(R"({"type":"function","function":{"name":"person"}})"));
  ASSERT_EQ(body(0)["tools"].size(), 1u);
  EXPECT_EQ(body(0)["tools"][0]["function"]["parameters"], kPersonSchema);
  EXPECT_FALSE(body(0).contains("response_format"));
  const auto view = c.getMessages();
  ASSERT_EQ(view.size(), 3u);
  EXPECT_TRUE(view[2].toolCalls.empty());
  EXPECT_EQ(json::parse(view[2].content), json({{"name", "Ada"}, {"age", 36}}));
  // The history goes on as any other: the next call is accepted.
  server_->setScript(mock::readScript(R"({"reply": {"content": "ok"}})"));
  c.addMessage(Message::user("thanks"));
  EXPECT_EQ(c.executeLlmCall().message.content, "ok");
}

TEST_F(Structured, ARefusedJsonSchemaFallsBackAndIsRemembered) {
  startMock(R"(
{"match": {"response_format": "json_schema"}, "error": {"status": 400, "body": "{\"error\": {\"message\": \"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.\", \"type\": \"invalid_request_error\"}}"}}
{"match": {"response_format": "json_object"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}}
)");
  ConversationOptions o = options();
  ConversationManager c(o);
  std::vector<StructuredAttempt> attempts;
  StructuredOptions so;
  so.onAttempt = [&](const StructuredAttempt& a) { attempts.push_back(a); };
  const StructuredResult r = c.runStructuredResult("Who?", kPersonSchema, so);
  EXPECT_EQ(r.rung, StructuredOutputMode::JsonObject);
  EXPECT_EQ(r.value["name"], "Ada");
  EXPECT_EQ(r.usage.promptTokens, 10);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_TRUE(attempts[0].refused);
  EXPECT_EQ(attempts[0].rung, StructuredOutputMode::JsonSchema);
  EXPECT_EQ(attempts[1].rung, StructuredOutputMode::JsonObject);
  EXPECT_TRUE(attempts[1].valid);
  EXPECT_EQ(c.getMessages().size(), 3u);  // the refused call left nothing
  // The same client starts at json_object from now on; another client does not.
  ConversationManager again(o);
  again.runStructured("Who?", kPersonSchema);
  ASSERT_EQ(server_->requests().size(), 3u);
  EXPECT_EQ(body(2)["response_format"]["type"], "json_object");
  ConversationManager fresh(options());
  fresh.runStructured("Who?", kPersonSchema);
  EXPECT_EQ(body(3)["response_format"]["type"], "json_schema");
}

TEST_F(Structured, ARefusalOfAFixedRungIsTheHttpError) {
  startMock(
      R"({"match": {"response_format": "json_schema"}, "error": {"status": 400, "body": "{\"error\": {\"message\": \"response_format json_schema is not supported\"}}"}})");
  ConversationManager c(options(Protocol::OpenAiChat, StructuredOutputMode::JsonSchema));
  const auto before = c.getMessages();
  try {
    c.runStructured("Who?", kPersonSchema);
    FAIL();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
  }
  EXPECT_EQ(c.getMessages(), before);
  EXPECT_EQ(server_->requests().size(), 1u);
}

TEST_F(Structured, TheRepairLoopSendsTheErrorsBackAndHidesTheRepairs) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\", \"age\": \"thirty-six\"}", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}}
{"match": {"request": 2}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "usage": {"prompt_tokens": 30, "completion_tokens": 6}}}
)");
  ConversationManager c(options());
  const size_t batchBefore = c.getMarkMap().currentBatch;
  std::vector<StructuredAttempt> attempts;
  StructuredOptions so;
  so.onAttempt = [&](const StructuredAttempt& a) { attempts.push_back(a); };
  const StructuredResult r = c.runStructuredResult("Who?", kPersonSchema, so);
  EXPECT_EQ(r.value, json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(r.attempts, 2);
  EXPECT_EQ(r.usage.promptTokens, 40);
  EXPECT_EQ(r.usage.completionTokens, 11);
  EXPECT_EQ(c.getTokenUsage().cumulative.promptTokens, 40);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_FALSE(attempts[0].valid);
  ASSERT_EQ(attempts[0].errors.size(), 1u);
  EXPECT_EQ(attempts[0].errors[0], "age: expected type integer, got string");
  EXPECT_EQ(attempts[1].attempt, 2);
  // The repair request carries the bad answer and its errors.
  const json repair = body(1)["messages"];
  EXPECT_EQ(repair[repair.size() - 2]["role"], "assistant");
  EXPECT_NE(
      repair.back()["content"].get<std::string>().find("age: expected type integer, got string"),
      std::string::npos);
  // The view: the prompt and the valid answer; a rollback shows the repair.
  auto view = c.getMessages();
  ASSERT_EQ(view.size(), 3u);
  EXPECT_EQ(view[1], Message::user("Who?"));
  EXPECT_EQ(json::parse(view[2].content), r.value);
  EXPECT_EQ(c.storageSize(), 5u);
  c.rollbackToBatch(c.getMarkMap().currentBatch - 1);
  view = c.getMessages();
  ASSERT_EQ(view.size(), 5u);
  EXPECT_EQ(json::parse(view[2].content)["age"], "thirty-six");
  EXPECT_EQ(view[3].role, Role::User);
  // Back before the call: as if it never happened.
  c.rollbackToBatch(batchBefore);
  EXPECT_EQ(c.getMessages().size(), 1u);
}

TEST_F(Structured, GivingUpLeavesTheViewAsItWas) {
  startMock(
      R"({"reply": {"content": "{\"name\": \"Ada\"}", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}})");
  ConversationManager c(options());
  c.addMessage(Message::user("hello"));
  c.addMessage(Message::assistant("hi"));
  const auto before = c.getMessages();
  const MessageMarkMap mapBefore = c.getMarkMap();
  StructuredOptions so;
  so.maxRepairs = 1;
  try {
    c.runStructured("Who?", kPersonSchema, so);
    FAIL();
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.path(), "age");
    ASSERT_EQ(e.messages().size(), 1u);
    EXPECT_EQ(e.messages()[0], "answer: missing required property 'age'");
    EXPECT_EQ(e.details().attempts, 2);
    EXPECT_EQ(e.details().rung, "json_schema");
    EXPECT_EQ(e.details().reply, R"({"name": "Ada"})");
  }
  EXPECT_EQ(server_->requests().size(), 2u);
  EXPECT_EQ(c.getMessages(), before);
  EXPECT_EQ(c.getMarkMap().currentBatch, mapBefore.currentBatch);
  EXPECT_EQ(c.getMarkMap().originalIndices, mapBefore.originalIndices);
  EXPECT_EQ(c.getTokenUsage().cumulative.promptTokens, 14);  // both calls were paid for
  EXPECT_TRUE(c.checkConsistency().empty()) << c.checkConsistency();
}

TEST_F(Structured, AStoredThreadHoldsWhatTheViewShows) {
  startMock(R"(
{"match": {"user_contains": "never"}, "reply": {"content": "{\"name\": 1}"}}
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\"}"}}
{"reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
)");
  const auto dir =
      std::filesystem::temp_directory_path() / ("parley-structured-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::shared_ptr<ConversationStore> store = openStore((dir / "chats.db").string());
  auto thread = std::make_shared<StoredThread>(store, "t1");
  ConversationOptions o = options();
  o.persist = thread;
  ConversationManager c(o);
  thread->attach(c);
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema)["age"], 36);  // after one repair
  StructuredOptions once;
  once.maxRepairs = 0;
  EXPECT_THROW(c.runStructured("never", kPersonSchema, once), StructuredOutputError);
  ConversationManager reloaded(options());
  StoredThread(store, "t1").load(reloaded);
  EXPECT_EQ(reloaded.getMessages(), c.getMessages());
  ASSERT_EQ(c.getMessages().size(), 3u);
  EXPECT_EQ(json::parse(c.getMessages()[2].content)["age"], 36);
  std::filesystem::remove_all(dir);
}

TEST_F(Structured, AReplyThatIsNotJsonIsRepairedThenReported) {
  startMock(R"({"reply": {"content": "Ada, 36"}})");
  ConversationManager c(options());
  StructuredOptions so;
  so.maxRepairs = 0;
  try {
    c.runStructured("Who?", kPersonSchema, so);
    FAIL();
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.path(), "answer");
    EXPECT_NE(e.messages().at(0).find("not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.getMessages().size(), 1u);
}

TEST_F(Structured, RunAsReadsTheTypeAndNamesTheFailingField) {
  startMock(R"(
{"match": {"user_contains": "good"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
{"match": {"user_contains": "wrong"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": \"x\"}"}}
{"match": {"user_contains": "missing"}, "reply": {"content": "{\"name\": \"Ada\"}"}}
)");
  ConversationManager c(options());
  const Person p = c.runAs<Person>("good");
  EXPECT_EQ(p.name, "Ada");
  EXPECT_EQ(p.age, 36);
  StructuredOptions once;
  once.maxRepairs = 0;
  try {
    c.runAs<Person>("wrong", once);
    FAIL();
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.path(), "age");
    EXPECT_NE(std::string(e.what()).find("age: expected type integer, got string"),
              std::string::npos)
        << e.what();
  }
  // The schema lets the answer through; from_json does not: the field is named and nothing
  // is kept.
  const size_t size = c.getMessageCount();
  try {
    c.runAs<Loose>("missing", once);
    FAIL();
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.path(), "age");
  }
  EXPECT_EQ(c.getMessageCount(), size);
}

TEST_F(Structured, StreamingShowsThePartialAnswerAtEveryChunk) {
  const json answer = json::parse(kAnswer);
  startMock(json({{"reply", {{"content", kAnswer}, {"chunk_size", 1}}}}).dump());
  ConversationManager c(options());
  const json schema = {{"type", "object"}, {"required", json::array({"name", "tags"})}};
  std::vector<json> partials;
  StructuredOptions so;
  so.onPartial = [&](const json& partial) { partials.push_back(partial); };
  EXPECT_EQ(c.runStructured("Who?", schema, so), answer);
  EXPECT_EQ(body(0)["stream"], true);
  ASSERT_GT(partials.size(), 50u);
  for (size_t i = 0; i < partials.size(); ++i) {
    ASSERT_TRUE(consistent(partials[i], answer)) << partials[i].dump();
    if (i > 0) {
      ASSERT_TRUE(consistent(partials[i - 1], partials[i])) << i;
    }
  }
  EXPECT_EQ(partials.back(), answer);
}

TEST_F(Structured, StreamingTheToolRungShowsTheArgumentsSoFar) {
  startMock(
      R"({"reply": {"tool_calls": [{"name": "answer", "arguments": {"name": "Ada Lovelace", "age": 36}}], "arguments_chunk_size": 1}})");
  ConversationManager c(options(Protocol::OpenAiChat, StructuredOutputMode::Tool));
  std::vector<json> partials;
  StructuredOptions so;
  so.onPartial = [&](const json& partial) { partials.push_back(partial); };
  const json value = c.runStructured("Who?", kPersonSchema, so);
  ASSERT_GT(partials.size(), 10u);
  EXPECT_EQ(partials.front(), json::object());
  EXPECT_EQ(partials.back(), value);
  // The mock writes the arguments with their keys sorted: "age" first.
  EXPECT_NE(std::find(partials.begin(), partials.end(), json({{"age", 36}, {"name", "Ada"}})),
            partials.end());
}

TEST_F(Structured, ResponsesSendsTextFormat) {
  startMock(
      R"({"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}})");
  ConversationManager c(options(Protocol::OpenAiResponses));
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema)["age"], 36);
  const json format = body(0)["text"]["format"];
  EXPECT_EQ(format["type"], "json_schema");
  EXPECT_EQ(format["name"], "answer");
  EXPECT_EQ(format["strict"], true);
  EXPECT_EQ(format["schema"], kPersonSchema);
}

TEST_F(Structured, ResponsesToolRungForcesTheFunction) {
  startMock(
      R"({"match": {"tool_choice": "answer"}, "reply": {"tool_calls": [{"name": "answer", "arguments": {"name": "Ada", "age": 36}}]}})");
  ConversationManager c(options(Protocol::OpenAiResponses, StructuredOutputMode::Tool));
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema)["age"], 36);
  EXPECT_EQ(body(0)["tool_choice"], json::parse(R"({"type": "function", "name": "answer"})"));
}

TEST_F(Structured, AnthropicStrictRungIsAForcedTool) {
  startMock(
      R"({"match": {"tool_choice": "answer"}, "reply": {"tool_calls": [{"name": "answer", "arguments": {"name": "Ada", "age": 36}}]}})");
  ConversationManager c(options(Protocol::Anthropic));
  const StructuredResult r = c.runStructuredResult("Who?", kPersonSchema);
  EXPECT_EQ(r.value, json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(r.rung, StructuredOutputMode::JsonSchema);
  const json sent = body(0);
  EXPECT_EQ(sent["tool_choice"], json::parse(R"({"type": "tool", "name": "answer"})"));
  ASSERT_EQ(sent["tools"].size(), 1u);
  EXPECT_EQ(sent["tools"][0]["input_schema"], kPersonSchema);
  EXPECT_FALSE(sent.contains("response_format"));
  EXPECT_TRUE(c.getMessages().back().toolCalls.empty());
}

TEST_F(Structured, AnthropicJsonObjectRungIsTheSystemPromptAlone) {
  startMock(
      R"({"match": {"tool_choice": "none"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}})");
  ConversationManager c(options(Protocol::Anthropic, StructuredOutputMode::JsonObject));
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema)["name"], "Ada");
  const json sent = body(0);
  EXPECT_FALSE(sent.contains("response_format"));
  EXPECT_NE(sent["system"].dump().find("JSON Schema"), std::string::npos) << sent["system"];
}

// Gemini: the strict rung is generationConfig's responseMimeType and responseJsonSchema, through
// the mock, which refuses a schema without the JSON MIME type as Google does; streamed, the
// partial answer grows chunk by chunk; the tool rung is a forced function call.
TEST_F(Structured, GeminiSendsAResponseJsonSchema) {
  startMock(
      R"({"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "chunk_size": 5}})");
  ConversationManager c(options(Protocol::Gemini));
  const StructuredResult r = c.runStructuredResult("Who?", kPersonSchema);
  EXPECT_EQ(r.value, json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(r.rung, StructuredOutputMode::JsonSchema);
  EXPECT_EQ(r.attempts, 1);
  const json sent = body(0);
  EXPECT_EQ(server_->requests().at(0)["path"], "/v1/models/gpt-4o-mini:generateContent");
  EXPECT_EQ(sent["generationConfig"]["responseMimeType"], "application/json");
  EXPECT_EQ(sent["generationConfig"]["responseJsonSchema"], kPersonSchema);
  EXPECT_FALSE(sent.contains("tools"));

  ConversationOptions streamed = options(Protocol::Gemini);
  streamed.stream = true;
  ConversationManager s(streamed);
  std::vector<json> partials;
  StructuredOptions so;
  so.onPartial = [&](const json& partial) { partials.push_back(partial); };
  EXPECT_EQ(s.runStructured("Who?", kPersonSchema, so), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_GT(partials.size(), 2u);
  EXPECT_EQ(partials.back(), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(server_->requests().at(1)["path"], "/v1/models/gpt-4o-mini:streamGenerateContent");
}

TEST_F(Structured, GeminiToolRungForcesTheFunction) {
  startMock(
      R"({"match": {"tool_choice": "answer"}, "reply": {"tool_calls": [{"name": "answer", "arguments": {"name": "Ada", "age": 36}}]}})");
  ConversationManager c(options(Protocol::Gemini, StructuredOutputMode::Tool));
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema)["age"], 36);
  const json sent = body(0);
  EXPECT_EQ(sent["toolConfig"]["functionCallingConfig"],
            json::parse(R"({"mode": "ANY", "allowedFunctionNames": ["answer"]})"));
  EXPECT_EQ(sent["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"], kPersonSchema);
  EXPECT_TRUE(c.getMessages().back().toolCalls.empty());
}

TEST_F(Structured, BadSchemasAndOptionsAreRefusedBeforeAnythingIsSent) {
  startMock(R"({"reply": {"content": "{}"}})");
  ConversationManager c(options());
  const auto expectRefused = [&](const json& schema, const StructuredOptions& so,
                                 const std::string& field) {
    try {
      c.runStructured("Who?", schema, so);
      FAIL() << schema.dump().substr(0, 80);
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
  };
  json deep = {{"type", "object"}};
  json* at = &deep;
  for (int i = 0; i < kMaxStructuredSchemaDepth + 1; ++i) {
    (*at)["properties"] = {{"x", {{"type", "object"}}}};
    at = &(*at)["properties"]["x"];
  }
  expectRefused(deep, {}, "schema");
  json big = {{"type", "object"}, {"description", std::string(kMaxStructuredSchemaBytes, 'x')}};
  expectRefused(big, {}, "schema");
  expectRefused(json::parse(R"({"type": "array"})"), {}, "schema");
  expectRefused(json::parse(R"({"type": "object", "properties": {"a": {"pattern": "("}}})"), {},
                "schema");
  StructuredOptions badName;
  badName.name = "not a name";
  expectRefused(kPersonSchema, badName, "name");
  StructuredOptions tooMany;
  tooMany.maxRepairs = kMaxStructuredRepairs + 1;
  expectRefused(kPersonSchema, tooMany, "maxRepairs");
  StructuredOptions noTime;
  noTime.turnTimeout = std::chrono::milliseconds(0);
  expectRefused(kPersonSchema, noTime, "turnTimeout");
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_EQ(c.getMessages().size(), 1u);
  // The same checks, without a conversation.
  EXPECT_NO_THROW(checkStructuredRequest(kPersonSchema, {}));
  EXPECT_THROW(checkStructuredRequest(deep, {}), ValidationError);
}

TEST_F(Structured, OnChunkSeesEachDeltaAfterThePartialAndCanStopTheCall) {
  startMock(R"({"reply": {"content": "{\"name\": \"Ada\", \"age\": 36}", "chunk_size": 3}})");
  ConversationManager c(options());
  std::string text;
  json partialSeen;
  int partialsAtChunk = 0;  // partial answers shown when a chunk that grew it arrived
  StructuredOptions so;
  so.stream = true;
  so.onPartial = [&](const json& partial) { partialSeen = partial; };
  so.onChunk = [&](const StreamDelta& delta) {
    text += delta.content;
    if (!partialSeen.is_null()) ++partialsAtChunk;
    return true;
  };
  EXPECT_EQ(c.runStructured("Who?", kPersonSchema, so), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_EQ(json::parse(text), json({{"name", "Ada"}, {"age", 36}}));
  EXPECT_GT(partialsAtChunk, 0);
  EXPECT_EQ(partialSeen, json({{"name", "Ada"}, {"age", 36}}));

  // false stops the call: CancelledError, the view as before.
  const auto before = c.getMessages();
  StructuredOptions stop;
  stop.stream = true;
  stop.onChunk = [](const StreamDelta&) { return false; };
  EXPECT_THROW(c.runStructured("Again?", kPersonSchema, stop), CancelledError);
  EXPECT_EQ(c.getMessages(), before);
}

TEST_F(Structured, TheTurnTimeoutBoundsTheRepairsToo) {
  startMock(R"(
{"match": {"request": 1}, "reply": {"content": "{\"name\": \"Ada\"}"}}
{"delay_ms": 60000, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}}
)");
  ConversationManager c(options());
  const auto before = c.getMessages();
  StructuredOptions so;
  so.turnTimeout = std::chrono::milliseconds(300);
  try {
    c.runStructured("Who?", kPersonSchema, so);
    FAIL() << "the repair outlived the deadline";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("turn"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_->requests().size(), 2u);
  EXPECT_EQ(c.getMessages(), before);
}

}  // namespace
}  // namespace parley
