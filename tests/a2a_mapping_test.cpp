// The A2A 1.0 mapping (src/service/a2a_mapping.hpp) without a server: messages and parts into
// parley messages and back, a run as a Task, a run's events as StreamResponses, the Agent Card,
// the error shapes of both bindings, and each cap on what a client sends.
#include "service/a2a_mapping.hpp"

#include <gtest/gtest.h>

#include "parley/event_names.hpp"
#include "parley/event_types.hpp"
#include "parley/part.hpp"

namespace parley::service {
namespace {

using json = nlohmann::json;

json userMessage(json parts) {
  return {{"messageId", "m-1"}, {"role", "ROLE_USER"}, {"parts", std::move(parts)}};
}

// The A2aError a call throws (the test fails when it throws none).
template <typename F>
A2aError errorOf(F f) {
  try {
    f();
  } catch (const A2aError& e) {
    return e;
  }
  ADD_FAILURE() << "no A2aError";
  return a2aInternal("none");
}

RunInfo run(RunStatus status) {
  RunInfo r;
  r.id = "r-1";
  r.threadId = "ctx-1";
  r.status = status;
  r.input = {Message::user("hello")};
  return r;
}

StoredEvent event(int64_t seq, EventType type, json payload) {
  StoredEvent e;
  e.threadId = "ctx-1";
  e.seq = seq;
  e.runId = "r-1";
  e.type = std::string(eventName(type));
  e.payload = std::move(payload);
  return e;
}

TEST(A2aMapping, TextPartsBecomeOneUserMessage) {
  const Message m = a2aUserMessage(userMessage({{{"text", "one"}}, {{"text", "two"}}}));
  EXPECT_EQ(m.role, Role::User);
  EXPECT_EQ(m.content, "one\ntwo");
  EXPECT_FALSE(hasParts(m));
}

TEST(A2aMapping, FileAndDataPartsBecomeParleyParts) {
  const json message =
      userMessage({{{"text", "read this"}},
                   {{"raw", base64Encode("%PDF-1.4 x")},
                    {"mediaType", "application/pdf"},
                    {"filename", "a.pdf"}},
                   {{"url", "https://example.com/cat.png"}, {"mediaType", "image/png"}},
                   {{"data", {{"k", 1}}}}});
  const auto parts = partsOf(a2aUserMessage(message));
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[1].kind, PartKind::File);
  EXPECT_EQ(parts[1].filename, "a.pdf");
  EXPECT_EQ(parts[1].bytes, "%PDF-1.4 x");
  EXPECT_EQ(parts[2].kind, PartKind::Image);
  EXPECT_EQ(parts[2].url, "https://example.com/cat.png");
  EXPECT_EQ(parts[3].content, R"({"k":1})");
  // And back: the file keeps its bytes, name and type.
  const json back = a2aMessageOf(a2aUserMessage(message), "ctx-1", "r-1", "m");
  EXPECT_EQ(back["role"], "ROLE_USER");
  EXPECT_EQ(back["parts"][1]["raw"], base64Encode("%PDF-1.4 x"));
  EXPECT_EQ(back["parts"][1]["filename"], "a.pdf");
}

TEST(A2aMapping, MessagesParleyCannotCarryAreRefusedByName) {
  EXPECT_EQ(errorOf([] { a2aUserMessage(userMessage(json::array())); }).code, -32602);
  auto agent = userMessage({{{"text", "x"}}});
  agent["role"] = "ROLE_AGENT";
  EXPECT_NE(std::string(errorOf([&] { a2aUserMessage(agent); }).what()).find("message.role"),
            std::string::npos);
  const A2aError old = errorOf([] {
    a2aUserMessage(userMessage({{{"kind", "text"}, {"text", "x"}}}));
  });
  EXPECT_NE(std::string(old.what()).find("A2A 0.3"), std::string::npos);
  const A2aError url = errorOf([] {
    a2aUserMessage(userMessage({{{"url", "https://x/a.pdf"}, {"mediaType", "application/pdf"}}}));
  });
  EXPECT_EQ(url.code, -32005);
  EXPECT_EQ(url.reason, "CONTENT_TYPE_NOT_SUPPORTED");
  EXPECT_EQ(errorOf([] { a2aUserMessage(userMessage({{{"raw", "!!not base64"}}})); }).code, -32602);
  EXPECT_EQ(errorOf([] { a2aUserMessage(userMessage({{{"other", 1}}})); }).code, -32602);
}

TEST(A2aMapping, CapsOnPartsMessageBytesAndMetadata) {
  A2aLimits limits;
  limits.maxParts = 3;
  limits.maxMessageBytes = 100;
  limits.maxMetadataBytes = 50;
  json parts = json::array();
  for (int i = 0; i < 3; ++i)
    parts.push_back({{"text", "x"}});
  EXPECT_NO_THROW(a2aUserMessage(userMessage(parts), limits));
  parts.push_back({{"text", "x"}});
  EXPECT_NE(std::string(errorOf([&] { a2aUserMessage(userMessage(parts), limits); }).what())
                .find("4 parts, over 3 (A2aLimits::maxParts)"),
            std::string::npos);
  const json big = userMessage({{{"text", std::string(100, 'x')}}});
  EXPECT_NE(std::string(errorOf([&] { a2aUserMessage(big, limits); }).what())
                .find("A2aLimits::maxMessageBytes"),
            std::string::npos);
  json meta = userMessage({{{"text", "x"}}});
  meta["metadata"] = {{"k", std::string(60, 'x')}};
  EXPECT_NE(std::string(errorOf([&] { a2aUserMessage(meta, limits); }).what())
                .find("A2aLimits::maxMetadataBytes"),
            std::string::npos);
  // An answer to a waiting task is under the same caps.
  EXPECT_EQ(errorOf([&] { a2aAnswer(big, limits); }).code, -32602);
}

TEST(A2aMapping, AnswersAreTextOrALoneDataPart) {
  EXPECT_EQ(a2aAnswer(userMessage({{{"text", "blue"}}})), json("blue"));
  EXPECT_EQ(a2aAnswer(userMessage({{{"data", {{"approved", true}}}}})), json({{"approved", true}}));
  EXPECT_EQ(errorOf([] { a2aAnswer(userMessage({{{"raw", base64Encode("x")}}})); }).code, -32005);
}

TEST(A2aMapping, RunStatusesAreTaskStates) {
  EXPECT_EQ(a2aTaskState(RunStatus::Queued), "TASK_STATE_SUBMITTED");
  EXPECT_EQ(a2aTaskState(RunStatus::Running), "TASK_STATE_WORKING");
  EXPECT_EQ(a2aTaskState(RunStatus::Waiting), "TASK_STATE_INPUT_REQUIRED");
  EXPECT_EQ(a2aTaskState(RunStatus::Completed), "TASK_STATE_COMPLETED");
  EXPECT_EQ(a2aTaskState(RunStatus::Failed), "TASK_STATE_FAILED");
  EXPECT_EQ(a2aTaskState(RunStatus::Cancelled), "TASK_STATE_CANCELED");
  EXPECT_EQ(a2aTaskState(RunStatus::Rejected), "TASK_STATE_REJECTED");
  EXPECT_EQ(runStatusFromA2a("TASK_STATE_CANCELED"), RunStatus::Cancelled);
  EXPECT_EQ(runStatusFromA2a("UNRECOGNIZED"), std::nullopt);
  EXPECT_EQ(errorOf([] { runStatusFromA2a("TASK_STATE_AUTH_REQUIRED"); }).code, -32602);
}

TEST(A2aMapping, AWaitingRunIsInputRequiredWithItsQuestion) {
  RunInfo r = run(RunStatus::Waiting);
  r.wait = {{"kind", "interaction"}, {"prompt", "Which colour?"}};
  const json task = a2aTask(r, "");
  EXPECT_EQ(task["id"], "r-1");
  EXPECT_EQ(task["contextId"], "ctx-1");
  EXPECT_EQ(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
  EXPECT_EQ(task["status"]["message"]["parts"][0]["text"], "Which colour?");
  EXPECT_EQ(task["status"]["message"]["parts"][1]["data"]["kind"], "interaction");
  EXPECT_FALSE(task.contains("artifacts"));
}

TEST(A2aMapping, ACompletedRunHasItsAnswerAsArtifactAndHistory) {
  const json task = a2aTask(run(RunStatus::Completed), "hi there");
  EXPECT_EQ(task["artifacts"][0]["parts"][0]["text"], "hi there");
  ASSERT_EQ(task["history"].size(), 2u);
  EXPECT_EQ(task["history"][0]["role"], "ROLE_USER");
  EXPECT_EQ(task["history"][1]["role"], "ROLE_AGENT");
  EXPECT_EQ(a2aTask(run(RunStatus::Completed), "hi there", 1)["history"].size(), 1u);
  EXPECT_FALSE(
      a2aTask(run(RunStatus::Completed), "hi there", std::nullopt, false).contains("artifacts"));
}

TEST(A2aMapping, EventsBecomeStatusAndArtifactUpdates) {
  A2aTaskEncoder encoder(run(RunStatus::Running));
  auto out = encoder.feed(event(1, EventType::RunStarted, json::object()));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING");
  out = encoder.feed(event(2, EventType::LlmStreamChunk, {{"content", "Hel"}}));
  EXPECT_EQ(out[0]["artifactUpdate"]["append"], false);
  out = encoder.feed(event(3, EventType::LlmStreamChunk, {{"content", "lo"}}));
  EXPECT_EQ(out[0]["artifactUpdate"]["append"], true);
  // The reply's message_added after its chunks adds nothing again.
  Message reply = Message::assistant("Hello");
  reply.receivedAt = std::chrono::system_clock::now();
  MessageAdded added;
  added.message = reply;
  out = encoder.feed(event(4, EventType::MessageAdded, eventToJson(added)));
  EXPECT_TRUE(out.empty());
  // Another run's events are not this task's.
  StoredEvent other = event(5, EventType::LlmStreamChunk, {{"content", "x"}});
  other.runId = "r-2";
  EXPECT_TRUE(encoder.feed(other).empty());
  out = encoder.feed(
      event(6, EventType::RunWaiting, {{"wait", {{"kind", "approval"}, {"prompt", "Run rm?"}}}}));
  EXPECT_EQ(out[0]["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
  EXPECT_EQ(out[0]["statusUpdate"]["status"]["message"]["parts"][0]["text"], "Run rm?");
  EXPECT_TRUE(encoder.ended());
  // Answered: it goes on, and ends cancelled.
  encoder.feed(event(7, EventType::RunResponded, json::object()));
  EXPECT_FALSE(encoder.ended());
  out = encoder.feed(
      event(8, EventType::LlmExecutionFailed, {{"error", "cancelled"}, {"cancelled", true}}));
  EXPECT_EQ(out.back()["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED");
  EXPECT_TRUE(encoder.ended());
  EXPECT_EQ(encoder.answer(), "Hello");
}

TEST(A2aMapping, ErrorsInBothBindingsShapes) {
  const A2aError e = a2aTaskNotFound("r-9");
  EXPECT_EQ(e.jsonRpcError()["code"], -32001);
  EXPECT_EQ(e.jsonRpcError()["data"][0]["reason"], "TASK_NOT_FOUND");
  EXPECT_EQ(e.restBody()["error"]["code"], 404);
  EXPECT_EQ(e.restBody()["error"]["status"], "NOT_FOUND");
  EXPECT_EQ(e.restBody()["error"]["details"][0]["domain"], "a2a-protocol.org");
  EXPECT_EQ(a2aTaskNotCancelable("r", "TASK_STATE_COMPLETED").code, -32002);
  EXPECT_EQ(a2aPushNotSupported().code, -32003);
  EXPECT_EQ(a2aUnsupported("x").code, -32004);
  EXPECT_EQ(a2aVersionNotSupported("0.3").code, -32009);
}

TEST(A2aMapping, TheCardNamesBothBindingsTheSkillsAndTheBearerScheme) {
  A2aLimits limits;
  limits.maxSkills = 2;
  const json card = a2aAgentCard({"http://h:1", {"a", "b", "c"}, true, false}, limits);
  EXPECT_EQ(card["supportedInterfaces"][0]["url"], "http://h:1/a2a/jsonrpc");
  EXPECT_EQ(card["supportedInterfaces"][1]["protocolBinding"], "HTTP+JSON");
  EXPECT_EQ(card["skills"].size(), 2u);  // capped
  EXPECT_EQ(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
  const json open = a2aAgentCard({"http://h:1", {}, false, false});
  EXPECT_EQ(open["skills"][0]["id"], "default");
  EXPECT_FALSE(open.contains("securitySchemes"));
}

}  // namespace
}  // namespace parley::service
