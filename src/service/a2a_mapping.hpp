// The Agent2Agent (A2A 1.0) data model mapped onto parley's (docs/a2a.md): a task is a durable
// run, its contextId the run's thread, its state the run's status (INPUT_REQUIRED a waiting
// run), its messages parley messages, its one artifact the run's answer, and a task's stream an
// encoding of the run's events (event_types.hpp). Pure functions and one encoder, shared by the
// JSON-RPC and HTTP+JSON bindings (a2a_routes.cpp) and tested without a server. Internal to
// src/service/.
//
// Thread-safety: values and pure functions; an A2aTaskEncoder belongs to one stream.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"
#include "parley/run_store.hpp"

namespace parley::service {

inline constexpr const char* kA2aProtocolVersion = "1.0";

// The caps on what an A2A client sends (each past-the-cap input is InvalidParams naming it).
struct A2aLimits {
  size_t maxParts = 64;                // parts of one message
  size_t maxMessageBytes = 512 << 10;  // one message's parts as JSON (bytes base64-encoded)
  size_t maxMetadataBytes = 64 << 10;  // a message's or a request's metadata as JSON
  size_t maxPageSize = 100;            // ListTasks pageSize (default 50)
  size_t maxHistoryLength = 1'000;     // historyLength
  size_t maxTaskIdBytes = 128;         // taskId, contextId, messageId
  size_t maxSkills = 64;               // skills on the card (one per served profile)
};

// An A2A error: its JSON-RPC code, its HTTP status and google.rpc status, and its reason
// (UPPER_SNAKE_CASE, the type without "Error"), as the specification's section 5.4 maps them.
struct A2aError : std::runtime_error {
  A2aError(int code, int httpStatus, std::string status, std::string reason,
           const std::string& message)
      : std::runtime_error(message),
        code(code),
        httpStatus(httpStatus),
        status(std::move(status)),
        reason(std::move(reason)) {}
  int code;
  int httpStatus;
  std::string status;
  std::string reason;

  // {"code", "message", "data": [ErrorInfo]} (JSON-RPC's error member)
  nlohmann::json jsonRpcError() const;
  // {"error": {"code", "status", "message", "details": [ErrorInfo]}} (HTTP+JSON)
  nlohmann::json restBody() const;
};

A2aError a2aTaskNotFound(const std::string& id);
A2aError a2aTaskNotCancelable(const std::string& id, const std::string& state);
A2aError a2aPushNotSupported();
A2aError a2aUnsupported(const std::string& what);
A2aError a2aContentTypeNotSupported(const std::string& what);
A2aError a2aVersionNotSupported(const std::string& version);
A2aError a2aInvalidParams(const std::string& what);
A2aError a2aInvalidRequest(const std::string& what);
A2aError a2aMethodNotFound(const std::string& method);
A2aError a2aParseError(const std::string& what);
A2aError a2aInternal(const std::string& what);

// "TASK_STATE_SUBMITTED" ... for a run's status.
std::string a2aTaskState(RunStatus status);
// The status a TaskState names (ListTasks' filter); nullopt for UNSPECIFIED; InvalidParams for
// another name or for a state no run has (AUTH_REQUIRED).
std::optional<RunStatus> runStatusFromA2a(const std::string& state);
bool a2aTerminal(RunStatus status);

// A user's A2A Message as a parley user message: text parts joined; a file part (raw bytes, or an
// image URL) a parley Part; a data part its JSON as text. InvalidParams for a message that is
// not a user message with 1 to maxParts parts, past maxMessageBytes, or with a part parley
// cannot carry (ContentTypeNotSupported: a file URL that is not an image).
Message a2aUserMessage(const nlohmann::json& message, const A2aLimits& limits = {});
// The answer a message gives a task that waits (a run waiting for a person): its text, or the
// value of a lone data part (an approval {"approved": true}, an elicitation's form).
nlohmann::json a2aAnswer(const nlohmann::json& message, const A2aLimits& limits = {});

// An A2A Message of the agent (ROLE_AGENT) with one text part, or of the user for a parley
// message (its parts mapped back).
nlohmann::json a2aAgentMessage(const std::string& text, const std::string& contextId,
                               const std::string& taskId, const std::string& messageId);
nlohmann::json a2aMessageOf(const Message& message, const std::string& contextId,
                            const std::string& taskId, const std::string& messageId);

// The TaskStatus of a run: its state, a message for INPUT_REQUIRED (what it waits for, with the
// wait as a data part) and FAILED (the error), the time of its last change.
nlohmann::json a2aTaskStatus(const RunInfo& run);

// The Task of a run: id = run id, contextId = thread id, the status, the history (the run's input,
// then the answer; the last `historyLength` when given) and the artifact "answer" (the answer's
// text) unless `artifacts` is false.
nlohmann::json a2aTask(const RunInfo& run, const std::string& answer,
                       std::optional<size_t> historyLength = std::nullopt, bool artifacts = true);

// Turns a run's stored events, in order, into A2A StreamResponse objects: WORKING when it starts
// (again), the answer's text as artifact updates of the artifact "answer" (appended), and the
// status it ends or waits in. ended() after a terminal status or INPUT_REQUIRED (a wait answered
// later goes on: the run_responded that follows makes it WORKING again).
class A2aTaskEncoder {
 public:
  explicit A2aTaskEncoder(RunInfo run) : run_(std::move(run)) {}
  std::vector<nlohmann::json> feed(const StoredEvent& event);
  bool ended() const { return ended_; }
  const std::string& answer() const { return answer_; }
  // Reads the run's waits from `run` (the wait a run_waiting event carries is what it says).
  void setRun(RunInfo run) { run_ = std::move(run); }

 private:
  nlohmann::json statusUpdate(const std::string& state, nlohmann::json message, bool final);
  nlohmann::json artifactText(const std::string& text);

  RunInfo run_;
  std::string answer_;
  std::string streamed_;   // text streamed since the last reply
  bool separate_ = false;  // a reply ended: the next text starts after a blank line
  bool artifactStarted_ = false;
  bool ended_ = false;
};

// What the Agent Card says of the service.
struct A2aCardInput {
  std::string baseUrl;                // http://HOST:PORT, as the client reached the service
  std::vector<std::string> profiles;  // the served profiles (skills); empty: the default
  bool bearer = false;                // the service wants a bearer token
  bool extended = false;              // the authenticated (extended) card
};
nlohmann::json a2aAgentCard(const A2aCardInput& input, const A2aLimits& limits = {});

}  // namespace parley::service
