#include "service/a2a_mapping.hpp"

#include "parley/errors.hpp"
#include "parley/event_names.hpp"
#include "parley/event_types.hpp"
#include "parley/iso_time.hpp"
#include "parley/part.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

const char* const kErrorInfoType = "type.googleapis.com/google.rpc.ErrorInfo";
const char* const kErrorDomain = "a2a-protocol.org";
const char* const kAnswerArtifact = "answer";

std::string a2aDump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

json errorInfo(const A2aError& e) {
  return json::array({{{"@type", kErrorInfoType}, {"reason", e.reason}, {"domain", kErrorDomain}}});
}

const json* a2aField(const json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string a2aString(const json& object, const char* name, const char* where) {
  const json* value = a2aField(object, name);
  if (!value) return "";
  if (!value->is_string()) throw a2aInvalidParams(std::string(where) + "." + name + ": a string");
  return value->get<std::string>();
}

// The parts of a message, checked against the caps.
const json& a2aParts(const json& message, const A2aLimits& limits) {
  if (!message.is_object()) throw a2aInvalidParams("message: an object");
  const json* parts = a2aField(message, "parts");
  if (!parts || !parts->is_array() || parts->empty())
    throw a2aInvalidParams("message.parts: at least one part");
  if (parts->size() > limits.maxParts) {
    throw a2aInvalidParams("message.parts: " + std::to_string(parts->size()) + " parts, over " +
                           std::to_string(limits.maxParts) + " (A2aLimits::maxParts)");
  }
  const size_t bytes = a2aDump(*parts).size();
  if (bytes > limits.maxMessageBytes) {
    throw a2aInvalidParams("message.parts: " + std::to_string(bytes) + " bytes, over " +
                           std::to_string(limits.maxMessageBytes) +
                           " (A2aLimits::maxMessageBytes)");
  }
  if (const json* meta = a2aField(message, "metadata");
      meta && a2aDump(*meta).size() > limits.maxMetadataBytes) {
    throw a2aInvalidParams("message.metadata: over " + std::to_string(limits.maxMetadataBytes) +
                           " bytes (A2aLimits::maxMetadataBytes)");
  }
  return *parts;
}

std::string a2aRole(const json& message) {
  const json* role = a2aField(message, "role");
  if (!role) return "";
  if (role->is_string()) return role->get<std::string>();
  if (role->is_number_integer()) return role->get<int>() == 1 ? "ROLE_USER" : "ROLE_AGENT";
  return "";
}

Part a2aPart(const json& part, size_t index) {
  const std::string where = "message.parts[" + std::to_string(index) + "]";
  if (!part.is_object()) throw a2aInvalidParams(where + ": an object");
  if (part.contains("kind")) {
    throw a2aInvalidParams(where +
                           ".kind: a part of A2A 0.3; this service speaks A2A 1.0 "
                           "(text, raw, url or data)");
  }
  const std::string mediaType = a2aString(part, "mediaType", where.c_str());
  const std::string filename = a2aString(part, "filename", where.c_str());
  if (const json* text = a2aField(part, "text")) {
    if (!text->is_string()) throw a2aInvalidParams(where + ".text: a string");
    return Part::text(text->get<std::string>());
  }
  if (const json* raw = a2aField(part, "raw")) {
    if (!raw->is_string()) throw a2aInvalidParams(where + ".raw: base64 text");
    auto bytes = base64Decode(raw->get<std::string>());
    if (!bytes) throw a2aInvalidParams(where + ".raw: not base64");
    try {
      if (mediaType.starts_with("image/")) return Part::imageBytes(std::move(*bytes), mediaType);
      if (mediaType.starts_with("audio/")) return Part::audioBytes(std::move(*bytes), mediaType);
      return Part::fileBytes(std::move(*bytes), filename.empty() ? "file" : filename, mediaType);
    } catch (const ValidationError& e) {
      throw a2aContentTypeNotSupported(where + ": " + e.what());
    }
  }
  if (const json* url = a2aField(part, "url")) {
    if (!url->is_string()) throw a2aInvalidParams(where + ".url: a string");
    // A model reads an image by its URL; any other file would have to be fetched by the service,
    // which fetches nothing on a client's word.
    if (!mediaType.empty() && !mediaType.starts_with("image/")) {
      throw a2aContentTypeNotSupported(where + ": a file by URL (" + mediaType +
                                       ") is not fetched; send its bytes as `raw`");
    }
    return Part::imageUrl(url->get<std::string>());
  }
  if (const json* data = a2aField(part, "data")) return Part::text(a2aDump(*data));
  throw a2aInvalidParams(where + ": one of text, raw, url or data");
}

json a2aPartOf(const Part& part) {
  switch (part.kind) {
    case PartKind::Text:
      return {{"text", part.content}};
    case PartKind::Image:
      if (!part.url.empty()) return {{"url", part.url}, {"mediaType", "image/*"}};
      return {{"raw", base64Encode(part.bytes)}, {"mediaType", part.mimeType}};
    case PartKind::Audio:
    case PartKind::File: {
      json out = {{"raw", base64Encode(part.bytes)}, {"mediaType", part.mimeType}};
      if (!part.filename.empty()) out["filename"] = part.filename;
      return out;
    }
  }
  return {{"text", part.content}};
}

}  // namespace

json A2aError::jsonRpcError() const {
  return {{"code", code}, {"message", what()}, {"data", errorInfo(*this)}};
}

json A2aError::restBody() const {
  return {{"error",
           {{"code", httpStatus},
            {"status", status},
            {"message", what()},
            {"details", errorInfo(*this)}}}};
}

A2aError a2aTaskNotFound(const std::string& id) {
  return A2aError(-32001, 404, "NOT_FOUND", "TASK_NOT_FOUND", "task '" + id + "' not found");
}
A2aError a2aTaskNotCancelable(const std::string& id, const std::string& state) {
  return A2aError(-32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE",
                  "task '" + id + "' is " + state + ": it cannot be canceled");
}
A2aError a2aPushNotSupported() {
  return A2aError(-32003, 400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED",
                  "push notifications are not supported by this service (docs/a2a.md)");
}
A2aError a2aUnsupported(const std::string& what) {
  return A2aError(-32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION", what);
}
A2aError a2aContentTypeNotSupported(const std::string& what) {
  return A2aError(-32005, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED", what);
}
A2aError a2aVersionNotSupported(const std::string& version) {
  return A2aError(-32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED",
                  "A2A-Version '" + version.substr(0, 32) +
                      "' is not supported: this service "
                      "speaks A2A 1.0");
}
A2aError a2aInvalidParams(const std::string& what) {
  return A2aError(-32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS", what);
}
A2aError a2aInvalidRequest(const std::string& what) {
  return A2aError(-32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST", what);
}
A2aError a2aMethodNotFound(const std::string& method) {
  return A2aError(
      -32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND",
      "method '" + method.substr(0, 64) +
          "' not found (A2A 1.0 names: SendMessage, "
          "SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, ...)");
}
A2aError a2aParseError(const std::string& what) {
  return A2aError(-32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR", what);
}
A2aError a2aInternal(const std::string& what) {
  return A2aError(-32603, 500, "INTERNAL", "INTERNAL", what);
}

std::string a2aTaskState(RunStatus status) {
  switch (status) {
    case RunStatus::Queued:
      return "TASK_STATE_SUBMITTED";
    case RunStatus::Running:
      return "TASK_STATE_WORKING";
    case RunStatus::Waiting:
      return "TASK_STATE_INPUT_REQUIRED";
    case RunStatus::Completed:
      return "TASK_STATE_COMPLETED";
    case RunStatus::Failed:
      return "TASK_STATE_FAILED";
    case RunStatus::Cancelled:
      return "TASK_STATE_CANCELED";
    case RunStatus::Rejected:
      return "TASK_STATE_REJECTED";
  }
  return "TASK_STATE_UNSPECIFIED";
}

std::optional<RunStatus> runStatusFromA2a(const std::string& state) {
  // The JS SDK (1.3.0) sends "UNRECOGNIZED" for a ListTasks without a status: no filter either.
  if (state.empty() || state == "TASK_STATE_UNSPECIFIED" || state == "UNRECOGNIZED") {
    return std::nullopt;
  }
  for (RunStatus s :
       {RunStatus::Queued, RunStatus::Running, RunStatus::Waiting, RunStatus::Completed,
        RunStatus::Failed, RunStatus::Cancelled, RunStatus::Rejected}) {
    if (a2aTaskState(s) == state) return s;
  }
  throw a2aInvalidParams("status: '" + state.substr(0, 64) +
                         "' is not a task state this service has (TASK_STATE_SUBMITTED, "
                         "_WORKING, _INPUT_REQUIRED, _COMPLETED, _FAILED, _CANCELED, _REJECTED)");
}

bool a2aTerminal(RunStatus status) {
  return isFinished(status);
}

Message a2aUserMessage(const json& message, const A2aLimits& limits) {
  const json& parts = a2aParts(message, limits);
  const std::string role = a2aRole(message);
  if (role != "ROLE_USER") {
    throw a2aInvalidParams("message.role: '" + role.substr(0, 32) +
                           "'; a client's message is ROLE_USER");
  }
  std::vector<Part> mapped;
  bool onlyText = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    mapped.push_back(a2aPart(parts[i], i));
    onlyText = onlyText && mapped.back().kind == PartKind::Text;
  }
  if (onlyText) {
    std::string text;
    for (const auto& p : mapped)
      text += (text.empty() ? "" : "\n") + p.content;
    if (text.empty()) throw a2aInvalidParams("message.parts: no text");
    return Message::user(std::move(text));
  }
  try {
    return Message::user(std::move(mapped));
  } catch (const ValidationError& e) {
    throw a2aInvalidParams(std::string("message.parts: ") + e.what());
  }
}

json a2aAnswer(const json& message, const A2aLimits& limits) {
  const json& parts = a2aParts(message, limits);
  if (parts.size() == 1 && a2aField(parts[0], "data")) return parts[0]["data"];
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    const json* t = a2aField(parts[i], "text");
    const json* d = a2aField(parts[i], "data");
    if (t && t->is_string()) {
      text += (text.empty() ? "" : "\n") + t->get<std::string>();
    } else if (d) {
      text += (text.empty() ? "" : "\n") + a2aDump(*d);
    } else {
      throw a2aContentTypeNotSupported("message.parts[" + std::to_string(i) +
                                       "]: an answer to a task that waits is text or data");
    }
  }
  return text;
}

json a2aAgentMessage(const std::string& text, const std::string& contextId,
                     const std::string& taskId, const std::string& messageId) {
  return {{"messageId", messageId},
          {"contextId", contextId},
          {"taskId", taskId},
          {"role", "ROLE_AGENT"},
          {"parts", json::array({{{"text", text}}})}};
}

json a2aMessageOf(const Message& message, const std::string& contextId, const std::string& taskId,
                  const std::string& messageId) {
  json parts = json::array();
  std::vector<Part> mapped;
  try {
    mapped = partsOf(message);
  } catch (const ValidationError&) {
    mapped = {Part::text(message.content)};
  }
  for (const auto& p : mapped)
    parts.push_back(a2aPartOf(p));
  if (parts.empty()) parts.push_back({{"text", message.content}});
  return {{"messageId", messageId},
          {"contextId", contextId},
          {"taskId", taskId},
          {"role", message.role == Role::User ? "ROLE_USER" : "ROLE_AGENT"},
          {"parts", parts}};
}

json a2aTaskStatus(const RunInfo& run) {
  json status = {{"state", a2aTaskState(run.status)}, {"timestamp", isoTime(run.updatedAt)}};
  if (run.status == RunStatus::Waiting && run.wait.is_object()) {
    std::string prompt = run.wait.value("prompt", std::string());
    if (prompt.empty())
      prompt =
          "the task waits for an answer (" + run.wait.value("kind", std::string("input")) + ")";
    json message = a2aAgentMessage(prompt, run.threadId, run.id, run.id + "-wait");
    message["parts"].push_back({{"data", run.wait}, {"mediaType", "application/json"}});
    status["message"] = std::move(message);
  } else if ((run.status == RunStatus::Failed || run.status == RunStatus::Rejected) &&
             !run.error.empty()) {
    status["message"] = a2aAgentMessage(run.error, run.threadId, run.id, run.id + "-error");
  }
  return status;
}

json a2aTask(const RunInfo& run, const std::string& answer, std::optional<size_t> historyLength,
             bool artifacts) {
  json history = json::array();
  for (size_t i = 0; i < run.input.size(); ++i) {
    history.push_back(
        a2aMessageOf(run.input[i], run.threadId, run.id, run.id + "-in-" + std::to_string(i)));
  }
  if (!answer.empty()) {
    history.push_back(a2aAgentMessage(answer, run.threadId, run.id, run.id + "-answer"));
  }
  if (historyLength && history.size() > *historyLength) {
    history.erase(history.begin(),
                  history.begin() + static_cast<std::ptrdiff_t>(history.size() - *historyLength));
  }
  json task = {{"id", run.id},
               {"contextId", run.threadId},
               {"status", a2aTaskStatus(run)},
               {"history", std::move(history)}};
  if (artifacts && !answer.empty()) {
    task["artifacts"] = json::array(
        {{{"artifactId", kAnswerArtifact}, {"name", "answer"}, {"parts", {{{"text", answer}}}}}});
  }
  if (run.options.metadata.is_object()) task["metadata"] = run.options.metadata;
  return task;
}

json A2aTaskEncoder::statusUpdate(const std::string& state, json message, bool final) {
  json status = {{"state", state}, {"timestamp", isoTime(std::chrono::system_clock::now())}};
  if (!message.is_null()) status["message"] = std::move(message);
  // `final` is A2A 0.3's; 1.0 ends the stream at a terminal or interrupted state. It is kept for
  // clients of both.
  return {{"statusUpdate",
           {{"taskId", run_.id},
            {"contextId", run_.threadId},
            {"status", std::move(status)},
            {"metadata", {{"final", final}}}}}};
}

json A2aTaskEncoder::artifactText(const std::string& text) {
  json update = {
      {"taskId", run_.id},
      {"contextId", run_.threadId},
      {"artifact",
       {{"artifactId", kAnswerArtifact}, {"name", "answer"}, {"parts", {{{"text", text}}}}}},
      {"append", artifactStarted_},
      {"lastChunk", false}};
  artifactStarted_ = true;
  return {{"artifactUpdate", std::move(update)}};
}

std::vector<json> A2aTaskEncoder::feed(const StoredEvent& event) {
  std::vector<json> out;
  if (event.runId != run_.id) return out;
  auto addText = [&](const std::string& text) {
    if (text.empty()) return;
    std::string piece = separate_ ? "\n\n" + text : text;
    separate_ = false;
    answer_ += piece;
    out.push_back(artifactText(piece));
  };
  const auto type = eventTypeFromName(event.type);
  if (!type) return out;
  switch (*type) {
    case EventType::RunStarted:
    case EventType::RunResponded:
      ended_ = false;
      out.push_back(statusUpdate("TASK_STATE_WORKING", nullptr, false));
      break;
    case EventType::LlmStreamChunk: {
      const auto chunk = eventFromJson<LlmStreamChunk>(event.payload);
      streamed_ += chunk.content;
      addText(chunk.content);
      break;
    }
    case EventType::MessageAdded: {
      const auto added = eventFromJson<MessageAdded>(event.payload);
      const Message& m = added.message;
      if (m.role != Role::Assistant || !m.receivedAt) break;
      // A reply that was not streamed (or whose chunks expired) comes whole.
      if (streamed_.empty()) addText(m.content);
      streamed_.clear();
      if (!answer_.empty()) separate_ = true;
      break;
    }
    case EventType::RunWaiting: {
      RunInfo waiting = run_;
      waiting.status = RunStatus::Waiting;
      waiting.wait = event.payload.value("wait", json());
      out.push_back(
          statusUpdate("TASK_STATE_INPUT_REQUIRED", a2aTaskStatus(waiting)["message"], true));
      ended_ = true;
      break;
    }
    case EventType::RunRejected: {
      out.push_back(
          statusUpdate("TASK_STATE_REJECTED",
                       a2aAgentMessage(event.payload.value("error", std::string("rejected")),
                                       run_.threadId, run_.id, run_.id + "-error"),
                       true));
      ended_ = true;
      break;
    }
    case EventType::LlmExecutionCompleted:
      if (artifactStarted_) {
        out.push_back(
            {{"artifactUpdate",
              {{"taskId", run_.id},
               {"contextId", run_.threadId},
               {"artifact",
                {{"artifactId", kAnswerArtifact}, {"name", "answer"}, {"parts", {{{"text", ""}}}}}},
               {"append", true},
               {"lastChunk", true}}}});
      }
      out.push_back(statusUpdate("TASK_STATE_COMPLETED", nullptr, true));
      ended_ = true;
      break;
    case EventType::LlmExecutionFailed: {
      const bool cancelled = event.payload.value("cancelled", false);
      const std::string error = event.payload.value("error", std::string("the run failed"));
      out.push_back(statusUpdate(cancelled ? "TASK_STATE_CANCELED" : "TASK_STATE_FAILED",
                                 a2aAgentMessage(error, run_.threadId, run_.id, run_.id + "-error"),
                                 true));
      ended_ = true;
      break;
    }
    default:
      break;
  }
  return out;
}

json a2aAgentCard(const A2aCardInput& input, const A2aLimits& limits) {
  json skills = json::array();
  std::vector<std::string> profiles = input.profiles;
  if (profiles.empty()) profiles.push_back("default");
  if (profiles.size() > limits.maxSkills) profiles.resize(limits.maxSkills);
  for (const auto& name : profiles) {
    skills.push_back(
        {{"id", name},
         {"name", name},
         {"description", "a conversation with the tool loop of the profile '" + name +
                             "' (metadata.skill names it)"},
         {"tags", {"chat", "tools"}},
         {"inputModes",
          {"text/plain", "application/json", "image/*", "audio/*", "application/octet-stream"}},
         {"outputModes", {"text/plain"}}});
  }
  json card = {
      {"name", "parley"},
      {"description",
       "parley's durable runs as A2A tasks: a task is a run, its contextId a thread; a task "
       "waiting for an approval or an answer is INPUT_REQUIRED and the next message on it answers"},
      {"supportedInterfaces",
       {{{"url", input.baseUrl + "/a2a/jsonrpc"},
         {"protocolBinding", "JSONRPC"},
         {"protocolVersion", kA2aProtocolVersion}},
        {{"url", input.baseUrl + "/a2a/rest"},
         {"protocolBinding", "HTTP+JSON"},
         {"protocolVersion", kA2aProtocolVersion}}}},
      {"provider", {{"organization", "parley"}, {"url", input.baseUrl}}},
      {"version", "1.0.0"},
      {"capabilities",
       {{"streaming", true}, {"pushNotifications", true}, {"extendedAgentCard", true}}},
      {"defaultInputModes", {"text/plain", "application/json"}},
      {"defaultOutputModes", {"text/plain"}},
      {"skills", std::move(skills)}};
  if (input.bearer) {
    card["securitySchemes"] = {
        {"bearer",
         {{"httpAuthSecurityScheme",
           {{"scheme", "Bearer"},
            {"description", "one of the service's tokens (parley serve --auth-token-env)"}}}}}};
    card["securityRequirements"] =
        json::array({{{"schemes", {{"bearer", {{"list", json::array()}}}}}}});
  }
  if (input.extended) card["description"] = card["description"].get<std::string>() + " (extended)";
  return card;
}

}  // namespace parley::service
