// The UI streams (ui_streams.hpp; docs/service.md, "UI streams"): one stream driver over a
// RunFollower, and two encoders of the run's events, the AI SDK's UI message chunks and AG-UI's
// events.
#include "service/ui_streams.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parley/errors.hpp"
#include "parley/event_types.hpp"
#include "parley/json.hpp"
#include "service/run_follower.hpp"
#include "service/thread_titles.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxClientTools = 128;

// A tool call's arguments as a JSON value (what both protocols carry as the input); text that is
// not JSON stays a string.
json argumentsValue(const std::string& arguments) {
  if (arguments.empty()) return json::object();
  json value = parseJson(arguments, {}, false);
  return value.is_discarded() ? json(arguments) : value;
}

// A tool's result as the UI shows it: JSON when it is JSON, else the text.
json resultValue(const json& result) {
  if (!result.is_string()) return result;
  json value = parseJson(result.get<std::string>(), {}, false);
  return value.is_discarded() ? result : value;
}

std::string resultText(const json& result) {
  return result.is_string() ? result.get<std::string>() : result.dump();
}

// What both encoders track of a run as its events come: the text part open, whether the reply
// being made streamed any text.
class UiEncoder {
 public:
  virtual ~UiEncoder() = default;

  // The frames one event of the run gives.
  std::vector<json> encode(const StoredEvent& event) {
    std::vector<json> out;
    if (!started_) {
      started_ = true;
      begin(out);
    }
    const auto type = eventTypeFromName(event.type);
    if (!type) return out;
    switch (*type) {
      case EventType::LlmStreamChunk: {
        const auto chunk = eventFromJson<LlmStreamChunk>(event.payload);
        if (chunk.content.empty()) break;
        if (!textOpen_) {
          textOpen_ = true;
          textId_ = "text-" + std::to_string(event.seq);
          textStart(out);
        }
        streamed_ = true;
        textDelta(out, chunk.content);
        break;
      }
      case EventType::MessageAdded: {
        const auto added = eventFromJson<MessageAdded>(event.payload);
        if (added.message.role != Role::Assistant || !added.message.receivedAt) break;
        closeText(out);
        if (!streamed_ && !added.message.content.empty()) {
          // Not streamed: the whole reply as one part.
          textId_ = "text-" + std::to_string(event.seq);
          textStart(out);
          textDelta(out, added.message.content);
          textEnd(out);
        }
        streamed_ = false;
        break;
      }
      case EventType::ToolExecutionRequest: {
        closeText(out);
        const auto request = eventFromJson<ToolExecutionRequest>(event.payload);
        toolCall(out, request.toolCall.id, request.toolCall.name, request.toolCall.arguments);
        break;
      }
      case EventType::ToolExecutionCompleted: {
        const auto done = eventFromJson<ToolExecutionCompleted>(event.payload);
        toolResult(out, done.toolCallId, done.result.success,
                   done.result.success ? done.result.result : json(done.result.error));
        break;
      }
      case EventType::ToolExecutionFailed: {
        const auto failed = eventFromJson<ToolExecutionFailed>(event.payload);
        toolResult(out, failed.toolCallId, false, json(failed.error));
        break;
      }
      default:
        break;
    }
    return out;
  }

  // The frames that end the stream once the run is done (answered, waiting or failed).
  std::vector<json> finish(const RunAnswer& answer) {
    std::vector<json> out;
    if (!started_) {
      started_ = true;
      begin(out);
    }
    closeText(out);
    if (answer.wait.is_object()) {
      const json& wait = answer.wait;
      const std::string id = wait.value("tool_call_id", "");
      toolCall(out, id, wait.value("tool", ""), wait.value("arguments", ""));
      waitsFor(out, wait);
    } else if (!answer.clientCalls.empty()) {
      for (const auto& call : answer.clientCalls)
        toolCall(out, call.id, call.name, call.arguments);
      clientCalls(out, answer);
    } else if (answer.error) {
      failed(out, *answer.error);
    } else {
      completed(out, answer);
    }
    return out;
  }

  // "[DONE]" after the last frame (the AI SDK's stream does; AG-UI's does not).
  virtual bool doneSentinel() const { return false; }

 protected:
  virtual void begin(std::vector<json>& out) = 0;
  virtual void textStart(std::vector<json>& out) = 0;
  virtual void textDelta(std::vector<json>& out, const std::string& delta) = 0;
  virtual void textEnd(std::vector<json>& out) = 0;
  virtual void toolCall(std::vector<json>& out, const std::string& id, const std::string& name,
                        const std::string& arguments) = 0;
  virtual void toolResult(std::vector<json>& out, const std::string& id, bool success,
                          const json& result) = 0;
  virtual void waitsFor(std::vector<json>& out, const json& wait) = 0;
  virtual void clientCalls(std::vector<json>& out, const RunAnswer& answer) = 0;
  virtual void failed(std::vector<json>& out, const OpenAiError& error) = 0;
  virtual void completed(std::vector<json>& out, const RunAnswer& answer) = 0;

  void closeText(std::vector<json>& out) {
    if (!textOpen_) return;
    textOpen_ = false;
    textEnd(out);
  }

  std::string textId_;

 private:
  bool started_ = false;
  bool textOpen_ = false;
  bool streamed_ = false;  // the reply being made streamed text
};

// The AI SDK's UI message stream (ai: ui-message-stream/ui-message-chunks.ts).
class AiSdkEncoder : public UiEncoder {
 public:
  AiSdkEncoder(std::string messageId, std::string threadId, std::string runId)
      : messageId_(std::move(messageId)),
        threadId_(std::move(threadId)),
        runId_(std::move(runId)) {}
  bool doneSentinel() const override { return true; }

 protected:
  void begin(std::vector<json>& out) override {
    out.push_back({{"type", "start"},
                   {"messageId", messageId_},
                   {"messageMetadata", {{"thread", threadId_}, {"run", runId_}}}});
  }
  void textStart(std::vector<json>& out) override {
    out.push_back({{"type", "text-start"}, {"id", textId_}});
  }
  void textDelta(std::vector<json>& out, const std::string& delta) override {
    out.push_back({{"type", "text-delta"}, {"id", textId_}, {"delta", delta}});
  }
  void textEnd(std::vector<json>& out) override {
    out.push_back({{"type", "text-end"}, {"id", textId_}});
  }
  void toolCall(std::vector<json>& out, const std::string& id, const std::string& name,
                const std::string& arguments) override {
    out.push_back({{"type", "tool-input-available"},
                   {"toolCallId", id},
                   {"toolName", name},
                   {"input", argumentsValue(arguments)}});
  }
  void toolResult(std::vector<json>& out, const std::string& id, bool success,
                  const json& result) override {
    if (success) {
      out.push_back(
          {{"type", "tool-output-available"}, {"toolCallId", id}, {"output", resultValue(result)}});
    } else {
      out.push_back(
          {{"type", "tool-output-error"}, {"toolCallId", id}, {"errorText", resultText(result)}});
    }
  }
  void waitsFor(std::vector<json>& out, const json& wait) override {
    const std::string id = wait.value("tool_call_id", "");
    if (wait.value("kind", "") == "approval") {
      // The approval's id is the call's: the answer names it.
      out.push_back({{"type", "tool-approval-request"}, {"approvalId", id}, {"toolCallId", id}});
    }
    // A question (the human tool) is a call the client answers with its output.
    out.push_back({{"type", "finish"}, {"finishReason", "tool-calls"}});
  }
  void clientCalls(std::vector<json>& out, const RunAnswer&) override {
    out.push_back({{"type", "finish"}, {"finishReason", "tool-calls"}});
  }
  void failed(std::vector<json>& out, const OpenAiError& error) override {
    if (error.code == "run_cancelled") {
      out.push_back({{"type", "abort"}, {"reason", error.what()}});
      return;
    }
    out.push_back({{"type", "error"}, {"errorText", error.what()}});
    out.push_back({{"type", "finish"}, {"finishReason", "error"}});
  }
  void completed(std::vector<json>& out, const RunAnswer& answer) override {
    const bool length = answer.finishReason == "max_iterations" || answer.finishReason == "length";
    out.push_back(
        {{"type", "finish"},
         {"finishReason", length ? "length" : "stop"},
         {"messageMetadata",
          {{"thread", threadId_},
           {"run", runId_},
           {"model", answer.model},
           {"usage",
            {{"inputTokens", answer.usage.promptTokens},
             {"outputTokens", answer.usage.completionTokens},
             {"totalTokens", answer.usage.promptTokens + answer.usage.completionTokens}}}}}});
  }

 private:
  std::string messageId_;
  std::string threadId_;
  std::string runId_;
};

// AG-UI's events (@ag-ui/core).
class AgUiEncoder : public UiEncoder {
 public:
  AgUiEncoder(std::string threadId, std::string runId)
      : threadId_(std::move(threadId)), runId_(std::move(runId)) {}

 protected:
  void begin(std::vector<json>& out) override {
    out.push_back({{"type", "RUN_STARTED"}, {"threadId", threadId_}, {"runId", runId_}});
  }
  void textStart(std::vector<json>& out) override {
    out.push_back({{"type", "TEXT_MESSAGE_START"}, {"messageId", textId_}, {"role", "assistant"}});
  }
  void textDelta(std::vector<json>& out, const std::string& delta) override {
    out.push_back({{"type", "TEXT_MESSAGE_CONTENT"}, {"messageId", textId_}, {"delta", delta}});
  }
  void textEnd(std::vector<json>& out) override {
    out.push_back({{"type", "TEXT_MESSAGE_END"}, {"messageId", textId_}});
  }
  void toolCall(std::vector<json>& out, const std::string& id, const std::string& name,
                const std::string& arguments) override {
    json start = {{"type", "TOOL_CALL_START"}, {"toolCallId", id}, {"toolCallName", name}};
    if (!textId_.empty()) start["parentMessageId"] = textId_;
    out.push_back(std::move(start));
    if (!arguments.empty()) {
      out.push_back({{"type", "TOOL_CALL_ARGS"}, {"toolCallId", id}, {"delta", arguments}});
    }
    out.push_back({{"type", "TOOL_CALL_END"}, {"toolCallId", id}});
  }
  void toolResult(std::vector<json>& out, const std::string& id, bool,
                  const json& result) override {
    out.push_back({{"type", "TOOL_CALL_RESULT"},
                   {"messageId", "result-" + id},
                   {"toolCallId", id},
                   {"content", resultText(result)},
                   {"role", "tool"}});
  }
  void waitsFor(std::vector<json>& out, const json& wait) override {
    const bool approval = wait.value("kind", "") == "approval";
    out.push_back(
        {{"type", "RUN_FINISHED"},
         {"threadId", threadId_},
         {"runId", runId_},
         {"outcome",
          {{"type", "interrupt"},
           {"interrupts", json::array({{{"id", wait.value("tool_call_id", "")},
                                        {"reason", approval ? "tool_approval" : "input_required"},
                                        {"message", wait.value("prompt", "")},
                                        {"toolCallId", wait.value("tool_call_id", "")}}})}}}});
  }
  void clientCalls(std::vector<json>& out, const RunAnswer&) override {
    out.push_back({{"type", "RUN_FINISHED"},
                   {"threadId", threadId_},
                   {"runId", runId_},
                   {"outcome", {{"type", "success"}}}});
  }
  void failed(std::vector<json>& out, const OpenAiError& error) override {
    if (error.code == "run_cancelled") {
      out.push_back({{"type", "RUN_FINISHED"},
                     {"threadId", threadId_},
                     {"runId", runId_},
                     {"outcome", {{"type", "cancelled"}}}});
      return;
    }
    out.push_back({{"type", "RUN_ERROR"}, {"message", error.what()}, {"code", error.code}});
  }
  void completed(std::vector<json>& out, const RunAnswer& answer) override {
    json usage = {{"inputTokens", answer.usage.promptTokens},
                  {"outputTokens", answer.usage.completionTokens},
                  {"totalTokens", answer.usage.promptTokens + answer.usage.completionTokens}};
    if (!answer.model.empty()) usage["model"] = answer.model;
    out.push_back({{"type", "RUN_FINISHED"},
                   {"threadId", threadId_},
                   {"runId", runId_},
                   {"outcome", {{"type", "success"}}},
                   {"usage", json::array({usage})}});
  }

 private:
  std::string threadId_;
  std::string runId_;
};

// One UI stream: a run followed from `after`, its frames encoded; frames of events at or before
// `resumeAfter` (Last-Event-ID) were sent before and are not sent again.
struct UiStream {
  std::unique_ptr<RunFollower> run;
  std::unique_ptr<UiEncoder> encoder;
  int64_t resumeAfter = 0;
  std::chrono::steady_clock::time_point deadline;
  bool greeted = false;
};

std::string frame(int64_t seq, const json& data) {
  return "id: " + std::to_string(seq) +
         "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

void streamResponse(httplib::Response& res, const std::shared_ptr<UiStream>& stream,
                    std::chrono::milliseconds heartbeat, bool aiSdk) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  if (aiSdk) res.set_header("x-vercel-ai-ui-message-stream", "v1");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, heartbeat](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!stream->greeted) {
          stream->greeted = true;
          out = "retry: 1000\n\n";
          return sink.write(out.data(), out.size());
        }
        RunFollower& run = *stream->run;
        const auto step =
            run.step(std::min(std::chrono::steady_clock::now() + heartbeat, stream->deadline),
                     stream->deadline);
        if (step.parked) return true;  // called again when there is news
        for (const auto& event : step.events) {
          for (const auto& data : stream->encoder->encode(event))
            if (event.seq > stream->resumeAfter) out += frame(event.seq, data);
        }
        if (!run.done()) {
          // A comment only when nothing came (proxies keep an idle stream open).
          if (out.empty() && step.events.empty()) out = ": heartbeat\n\n";
          if (out.empty()) return true;
          return sink.write(out.data(), out.size());
        }
        for (const auto& data : stream->encoder->finish(run.answer()))
          if (run.lastSeq() > stream->resumeAfter || step.ended) out += frame(run.lastSeq(), data);
        if (stream->encoder->doneSentinel()) out += "data: [DONE]\n\n";
        if (!sink.write(out.data(), out.size())) return false;
        sink.done();
        return true;
      },
      [stream](bool) { stream->run.reset(); });
}

class UiRoutes {
 public:
  explicit UiRoutes(ServiceState& state) : state_(state) {}

  // POST /v1/ui/chat: useChat's request.
  void chat(const httplib::Request& req, httplib::Response& res) const {
    const json in = jsonBody(req);
    const std::string threadId = stringField(in, "id");
    checkId(threadId, "id");
    if (!in.contains("messages") || !in["messages"].is_array() || in["messages"].empty()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                        "messages must be a non-empty array of UI messages", "messages");
    }
    const json& last = in["messages"].back();
    const std::string role = last.is_object() ? last.value("role", "") : "";
    const json parts = last.is_object() ? last.value("parts", json::array()) : json::array();
    if (!parts.is_array()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                        "a UI message's parts must be an array", "messages");
    }
    std::optional<RunInfo> run;
    int64_t after = 0;
    if (role == "user") {
      std::string text;
      for (const json& part : parts)
        if (part.is_object() && part.value("type", "") == "text") text += part.value("text", "");
      if (text.empty()) {
        throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                          "the last user message holds no text part", "messages");
      }
      after = lastSeq(threadId);
      run = submit(threadId, Message::user(text), in);
    } else if (role == "assistant") {
      // The client's answers to what the run waits for: approvals, tool outputs.
      RunInfo waiting = waitingRun(threadId);
      json answer = answerFromParts(waiting, parts);
      after = lastSeq(threadId);
      run = respond(waiting, answer);
    } else {
      throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                        "the last message must be the user's or the assistant's", "messages");
    }
    auto stream = std::make_shared<UiStream>();
    stream->encoder = std::make_unique<AiSdkEncoder>(messageId(*run), threadId, run->id);
    open(*stream, *run, after, 0);
    streamResponse(res, stream, state_.options.heartbeat, true);
  }

  // GET /v1/ui/chat/{thread}/stream and /v1/ag-ui/{thread}/stream: the thread's last run again.
  void resume(const httplib::Request& req, httplib::Response& res, bool aiSdk) const {
    const std::string threadId = req.matches[1];
    checkId(threadId, "thread");
    int64_t resumeAfter = 0;
    const std::string lastId = req.get_header_value("Last-Event-ID");
    if (!lastId.empty()) {
      try {
        resumeAfter = std::stoll(lastId);
      } catch (const std::exception&) {
        throw OpenAiError(400, "invalid_request_error", "invalid_after",
                          "Last-Event-ID must be a sequence number", "");
      }
    }
    RunListOptions list;
    list.threadId = threadId;
    list.limit = state_.runs->options().limits.maxPage;
    std::vector<RunInfo> runs;
    if (state_.runs->threads().threadInfo(threadId)) runs = state_.runs->listRuns(list);
    if (runs.empty() || (aiSdk && isFinished(runs.back().status) && lastId.empty())) {
      res.status = 204;  // no active stream (what the AI SDK's resumeStream expects)
      return;
    }
    const RunInfo& run = runs.back();
    auto stream = std::make_shared<UiStream>();
    if (aiSdk) {
      stream->encoder = std::make_unique<AiSdkEncoder>(messageId(run), threadId, run.id);
    } else {
      stream->encoder = std::make_unique<AgUiEncoder>(threadId, run.id);
    }
    open(*stream, run, firstSeq(run) - 1, resumeAfter);
    streamResponse(res, stream, state_.options.heartbeat, aiSdk);
  }

  // POST /v1/ag-ui: AG-UI's RunAgentInput.
  void agUi(const httplib::Request& req, httplib::Response& res) const {
    const json in = jsonBody(req);
    const std::string threadId = stringField(in, "threadId");
    checkId(threadId, "threadId");
    std::string agUiRun = in.value("runId", "");
    const json resumeList = in.value("resume", json::array());
    const json messages = in.value("messages", json::array());
    if (!messages.is_array() || !resumeList.is_array()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_input",
                        "messages and resume must be arrays", "");
    }
    std::optional<RunInfo> run;
    int64_t after = 0;
    if (!resumeList.empty()) {
      RunInfo waiting = waitingRun(threadId);
      const std::string id = waiting.wait.value("tool_call_id", "");
      std::optional<json> answer;
      for (const json& entry : resumeList) {
        if (!entry.is_object() || entry.value("interruptId", "") != id) continue;
        if (entry.value("status", "resolved") == "cancelled") {
          answer = json{{"approved", false}};
        } else {
          answer = entry.value("payload", json(true));
        }
      }
      if (!answer) {
        throw OpenAiError(400, "invalid_request_error", "unknown_interrupt",
                          "resume names no interrupt of this thread (it waits for '" + id + "')",
                          "resume");
      }
      after = lastSeq(threadId);
      run = respond(waiting, *answer);
    } else {
      if (messages.empty()) {
        throw OpenAiError(400, "invalid_request_error", "invalid_input",
                          "messages holds no message", "messages");
      }
      const json& last = messages.back();
      const std::string role = last.is_object() ? last.value("role", "") : "";
      if (role == "user") {
        const json content = last.value("content", json(""));
        std::string text;
        if (content.is_string()) {
          text = content.get<std::string>();
        } else if (content.is_array()) {
          for (const json& part : content)
            if (part.is_object() && part.value("type", "") == "text")
              text += part.value("text", "");
        }
        if (text.empty()) {
          throw OpenAiError(400, "invalid_request_error", "invalid_input",
                            "the last user message holds no text", "messages");
        }
        after = lastSeq(threadId);
        json options = in;
        options["tools"] = agUiTools(in);
        run = submit(threadId, Message::user(text), options);
      } else if (role == "tool") {
        // The outputs of the client's tools (frontend tools) the run waits for.
        RunInfo waiting = waitingRun(threadId);
        json outputs = json::object();
        for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
          if (!it->is_object() || it->value("role", "") != "tool") break;
          const json content = it->value("content", json(""));
          outputs[it->value("toolCallId", "")] =
              content.is_string() ? content.get<std::string>() : content.dump();
        }
        after = lastSeq(threadId);
        run = respond(waiting, {{"tool_outputs", outputs}});
      } else {
        throw OpenAiError(400, "invalid_request_error", "invalid_input",
                          "the last message must be the user's or a tool's", "messages");
      }
    }
    if (agUiRun.empty()) agUiRun = run->id;
    auto stream = std::make_shared<UiStream>();
    stream->encoder = std::make_unique<AgUiEncoder>(threadId, agUiRun);
    open(*stream, *run, after, 0);
    streamResponse(res, stream, state_.options.heartbeat, false);
  }

 private:
  static std::string stringField(const json& in, const char* key) {
    if (!in.contains(key) || !in[key].is_string()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_id",
                        std::string(key) + " must be a string", key);
    }
    return in[key].get<std::string>();
  }

  void checkId(const std::string& id, const char* what) const {
    service::checkId(id, what, state_.options.maxIdBytes);
  }

  static std::string messageId(const RunInfo& run) { return "msg-" + run.id; }

  int64_t lastSeq(const std::string& threadId) const {
    return state_.runs->lastEventSeqs(std::span<const std::string>(&threadId, 1))
        .front()
        .value_or(0);
  }

  // The sequence number of the run's first event (its run_queued), found by reading the thread's
  // log from the start.
  int64_t firstSeq(const RunInfo& run) const {
    int64_t after = 0;
    const size_t page = state_.runs->options().limits.maxEventsPerCall;
    for (;;) {
      const auto events = state_.runs->readEvents(run.threadId, after, page);
      for (const auto& e : events)
        if (e.runId == run.id) return e.seq;
      if (events.size() < page) return after + 1;
      after = events.back().seq;
    }
  }

  void open(UiStream& stream, const RunInfo& run, int64_t after, int64_t resumeAfter) const {
    if (state_.feeds->streams() >= state_.options.maxStreams) {
      throw OpenAiError(503, "server_error", "too_many_streams",
                        "the service serves " + std::to_string(state_.options.maxStreams) +
                            " streams at most (ServiceOptions::maxStreams); try again later",
                        "");
    }
    stream.run = std::make_unique<RunFollower>(*state_.runs, *state_.feeds, run, after);
    stream.resumeAfter = resumeAfter;
    stream.deadline = std::chrono::steady_clock::now() + state_.options.openAiRunTimeout;
  }

  // The run's profile (the request's `model`, checked against the served ones) and client tools.
  RunInfo submit(const std::string& threadId, const Message& input, const json& in) const {
    SubmitOptions options;
    options.stream = true;
    if (in.contains("model") && in["model"].is_string()) {
      options.profile = in["model"].get<std::string>();
      const auto& served = state_.options.models;
      if (!served.empty() &&
          std::find(served.begin(), served.end(), options.profile) == served.end()) {
        throw OpenAiError(404, "invalid_request_error", "model_not_found",
                          "The model `" + options.profile + "` does not exist", "model");
      }
    }
    if (in.contains("tools") && in["tools"].is_array() && !in["tools"].empty()) {
      if (in["tools"].size() > kMaxClientTools) {
        throw OpenAiError(400, "invalid_request_error", "invalid_tools",
                          "tools holds more than 128 tools", "tools");
      }
      options.clientTools = in["tools"];
    }
    options.metadata = {{"source", "ui"}};
    createTitledThread(*state_.runs, threadId, input.content);
    try {
      return state_.runs->submit(threadId, std::vector<Message>{input}, options);
    } catch (const ValidationError& e) {
      throw OpenAiError(400, "invalid_request_error", "invalid_request", e.what(), "");
    }
  }

  // AG-UI's tools ({name, description, parameters}) as client tools.
  static json agUiTools(const json& in) {
    json out = json::array();
    for (const json& tool : in.value("tools", json::array())) {
      if (!tool.is_object()) continue;
      json t = {{"name", tool.value("name", "")}, {"description", tool.value("description", "")}};
      if (tool.contains("parameters") && tool["parameters"].is_object()) {
        t["parameters"] = tool["parameters"];
      }
      out.push_back(std::move(t));
    }
    return out;
  }

  RunInfo waitingRun(const std::string& threadId) const {
    RunListOptions list;
    list.threadId = threadId;
    list.status = RunStatus::Waiting;
    list.limit = 1;
    std::vector<RunInfo> found;
    if (state_.runs->threads().threadInfo(threadId)) found = state_.runs->listRuns(list);
    if (found.empty() || !found.front().response.is_null()) {
      throw OpenAiError(409, "conflict_error", "run_not_waiting",
                        "no run of thread '" + threadId + "' waits for an answer", "");
    }
    return found.front();
  }

  // The answer a UI message's tool parts give to what `run` waits for: an approval
  // ({"approved", "reason"}), a question's output, or the client tools' outputs.
  static json answerFromParts(const RunInfo& run, const json& parts) {
    const json& wait = run.wait;
    const std::string kind = wait.value("kind", "");
    if (kind == "client_tools") {
      json outputs = json::object();
      for (const json& part : parts) {
        if (!part.is_object() || part.value("state", "") != "output-available") continue;
        const json output = part.value("output", json());
        outputs[part.value("toolCallId", "")] =
            output.is_string() ? output.get<std::string>() : output.dump();
      }
      return {{"tool_outputs", outputs}};
    }
    const std::string id = wait.value("tool_call_id", "");
    for (const json& part : parts) {
      if (!part.is_object() || part.value("toolCallId", "") != id) continue;
      const std::string state = part.value("state", "");
      if (state == "approval-responded" || part.contains("approval")) {
        const json approval = part.value("approval", json::object());
        json answer = {{"approved", approval.value("approved", false)}};
        if (approval.contains("reason")) answer["reason"] = approval["reason"];
        return answer;
      }
      if (state == "output-available") return part.value("output", json(""));
      if (state == "output-error") return json{{"approved", false}};
    }
    throw OpenAiError(
        400, "invalid_request_error", "missing_answer",
        "the last assistant message answers nothing the run waits for (tool call '" + id + "')",
        "messages");
  }

  RunInfo respond(const RunInfo& waiting, const json& answer) const {
    try {
      return state_.runs->respond(waiting.id, answer);
    } catch (const StoreError& e) {
      throw OpenAiError(409, "conflict_error", "run_not_waiting", e.what(), "");
    }
  }

  ServiceState& state_;
};

}  // namespace

bool isUiStreamLongLived(std::string_view method, std::string_view path) {
  if (method == "POST") return path == "/v1/ui/chat" || path == "/v1/ag-ui";
  return method == "GET" && (path.starts_with("/v1/ui/chat/") || path.starts_with("/v1/ag-ui/")) &&
         path.ends_with("/stream");
}

void installUiStreamRoutes(httplib::Server& server, ServiceState& state) {
  auto routes = std::make_shared<UiRoutes>(state);
  const auto log = state.options.log;
  server.Post("/v1/ui/chat", openAiRoute(log, [routes](auto& q, auto& r) { routes->chat(q, r); }));
  server.Get("/v1/ui/chat/([^/]+)/stream",
             openAiRoute(log, [routes](auto& q, auto& r) { routes->resume(q, r, true); }));
  server.Post("/v1/ag-ui", openAiRoute(log, [routes](auto& q, auto& r) { routes->agUi(q, r); }));
  server.Get("/v1/ag-ui/([^/]+)/stream",
             openAiRoute(log, [routes](auto& q, auto& r) { routes->resume(q, r, false); }));
}

}  // namespace parley::service
