#include "service/run_follower.hpp"

#include "parley/errors.hpp"
#include "parley/event_types.hpp"
#include "parley/iso_time.hpp"
#include "parley/json.hpp"

namespace parley::service {

using json = nlohmann::json;

json OpenAiError::body() const {
  return {{"error",
           {{"message", what()},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", code}}}};
}

httplib::Server::Handler openAiRoute(
    Logger log, std::function<void(const httplib::Request&, httplib::Response&)> handler) {
  return [log = std::move(log), handler = std::move(handler)](const httplib::Request& req,
                                                              httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const OpenAiError& e) {
      sendJson(res, e.status, e.body());
    } catch (const ApiError& e) {
      sendJson(res, e.status, OpenAiError(e.status, e.type, e.code, e.what(), "").body());
    } catch (const ValidationError& e) {
      sendJson(res, 400,
               OpenAiError(400, "invalid_request_error", "invalid_request", e.what(), "").body());
    } catch (const std::exception& e) {
      writeLog(log, "parley serve: " + req.method + " " + req.path + ": " + e.what());
      sendJson(res, 500,
               OpenAiError(500, "server_error", "internal_error",
                           "the request failed on the server; its log says why", "")
                   .body());
    }
  };
}

namespace {

// A formatted event of the feed (formatSseEvent: "id", "event", "data: <toJson(StoredEvent)>")
// read back.
std::optional<StoredEvent> parseFormatted(const std::string& text) {
  const auto at = text.find("\ndata: ");
  if (at == std::string::npos) return std::nullopt;
  const json data = parseJson(std::string_view(text).substr(at + 7), {}, false);
  if (data.is_discarded() || !data.is_object()) return std::nullopt;
  StoredEvent e;
  e.seq = data.value("seq", int64_t{0});
  if (data.contains("run") && data["run"].is_string()) e.runId = data["run"];
  if (data.contains("trace") && data["trace"].is_string()) e.traceId = data["trace"];
  e.type = data.value("type", "");
  e.payload = data.value("payload", json::object());
  if (auto time = parseIsoTime(data.value("time", ""))) e.createdAt = *time;
  return e;
}

// The status a failed run's error answers with: the model server's own for a rate limit, 400 for
// input the run refused, else 500.
OpenAiError runError(const RunInfo& run, const std::string& fallback) {
  const std::string message = run.error.empty() ? fallback : run.error;
  const json details = run.result.is_object() ? run.result.value("error", json()) : json();
  const std::string kind = details.is_object() ? details.value("kind", "") : "";
  if (run.status == RunStatus::Cancelled) {
    return OpenAiError(500, "server_error", "run_cancelled", "the run was cancelled: " + message,
                       "");
  }
  if (kind == "http" && details.value("status", 0) == 429) {
    return OpenAiError(429, "rate_limit_error", "rate_limited", message, "");
  }
  if (kind == "validation") {
    return OpenAiError(400, "invalid_request_error", "invalid_request", message, "");
  }
  return OpenAiError(500, "server_error", "run_failed", message, "");
}

}  // namespace

RunFollower::RunFollower(RunStore& runs, EventFeeds& feeds, RunInfo run, int64_t after)
    : runs_(runs), feeds_(feeds), answer_(runs, std::move(run)), after_(after) {
  feed_ = feeds_.subscribe(answer_.run().threadId, after_);
}

RunFollower::~RunFollower() {
  feeds_.unsubscribe(feed_);
}

RunFollower::Step RunFollower::step(std::chrono::steady_clock::time_point wakeBy,
                                    std::chrono::steady_clock::time_point deadline) {
  Step step;
  if (done()) return step;
  const auto batch = feeds_.next(feed_, after_, std::min(wakeBy, deadline));
  if (batch.parked) {
    step.parked = true;
    return step;
  }
  for (const auto& text : batch.texts) {
    auto event = parseFormatted(*text);
    if (!event || event->seq <= after_) continue;
    if (event->payload.is_object() && event->payload.value("truncated", false)) {
      // Cut for the native stream (maxEventBytes): read it whole.
      auto whole = runs_.readEvents(run().threadId, event->seq - 1, 1);
      if (!whole.empty() && whole.front().seq == event->seq) event = std::move(whole.front());
    }
    after_ = event->seq;
    if (event->runId != run().id) continue;
    for (auto& piece : answer_.handle(*event))
      step.text.push_back(std::move(piece));
    step.events.push_back(std::move(*event));
    if (done()) return step;
  }
  after_ = std::max(after_, batch.last);
  if (batch.ended) {
    step.ended = true;
    answer_.giveUp(OpenAiError(503, "server_error", "stream_ended",
                               "the service is stopping or the thread was deleted", ""));
    return step;
  }
  if (std::chrono::steady_clock::now() >= deadline) {
    answer_.giveUp(OpenAiError(504, "server_error", "timeout",
                               "the run did not end in time (ServiceOptions::openAiRunTimeout)",
                               ""));
  }
  return step;
}

std::vector<std::string> AnswerBuilder::handle(const StoredEvent& event) {
  std::vector<std::string> out;
  auto addText = [&](const std::string& text) {
    if (text.empty()) return;
    std::string piece = separate_ ? "\n\n" + text : text;
    separate_ = false;
    answer_.text += piece;
    out.push_back(std::move(piece));
  };
  const auto type = eventTypeFromName(event.type);
  if (!type || done_) return out;
  switch (*type) {
    case EventType::LlmStreamChunk: {
      const auto chunk = eventFromJson<LlmStreamChunk>(event.payload);
      streamedReply_ += chunk.content;
      addText(chunk.content);
      break;
    }
    case EventType::MessageAdded: {
      const auto added = eventFromJson<MessageAdded>(event.payload);
      const Message& m = added.message;
      if (m.role != Role::Assistant || !m.receivedAt) break;
      announcedCalls_ = !m.toolCalls.empty();
      if (m.usage) addUsage(answer_.usage, *m.usage);
      if (!m.model.empty()) answer_.model = m.model;
      // A reply that was not streamed (stream off, or its chunks expired) comes whole.
      if (streamedReply_.empty()) addText(m.content);
      streamedReply_.clear();
      if (!answer_.text.empty()) separate_ = true;
      break;
    }
    case EventType::RunWaiting: {
      if (auto now = runs_.run(run_.id)) run_ = *now;
      const json& wait = run_.wait;
      if (wait.is_object() && wait.value("kind", "") == "client_tools") {
        // The reply that made the calls is journaled, not yet a message.
        const RunJournal journal = runs_.journal(run_.id);
        if (journal.pendingReply && !announcedCalls_) {
          if (journal.pendingReply->usage) addUsage(answer_.usage, *journal.pendingReply->usage);
          if (streamedReply_.empty()) addText(journal.pendingReply->content);
        }
        for (const json& call : wait.value("tool_calls", json::array())) {
          answer_.clientCalls.push_back(
              {call.value("id", ""), call.value("name", ""), call.value("arguments", "")});
        }
      } else {
        answer_.wait = wait;
        answer_.error = OpenAiError(
            409, "invalid_request_error", "interaction_required",
            "run " + run_.id + " waits for a person: " +
                (wait.is_object() ? wait.value("prompt", std::string()) : std::string()) +
                "; answer it with POST /v1/runs/" + run_.id + "/respond",
            "");
      }
      done_ = true;
      break;
    }
    case EventType::LlmExecutionCompleted:
    case EventType::LlmExecutionFailed:
      end(event);
      break;
    default:
      break;
  }
  return out;
}

void AnswerBuilder::end(const StoredEvent& event) {
  done_ = true;
  finished_ = true;
  if (auto now = runs_.run(run_.id)) run_ = *now;
  if (event.type == kRunCompletedEventType) {
    const json result = event.payload.value("result", json::object());
    answer_.finishReason = result.is_object() ? result.value("finish_reason", "stop") : "stop";
    return;
  }
  answer_.error = runError(run_, event.payload.value("error", "the run failed"));
}

AnswerBuilder replayRun(RunStore& runs, const RunInfo& run) {
  AnswerBuilder answer(runs, run);
  int64_t after = 0;
  const size_t page = runs.options().limits.maxEventsPerCall;
  for (;;) {
    const auto events = runs.readEvents(run.threadId, after, page);
    for (const auto& e : events) {
      if (e.runId == run.id) answer.handle(e);
      if (answer.done()) return answer;
    }
    if (events.size() < page) break;
    after = events.back().seq;
  }
  return answer;
}

void RunFollower::close(bool keep, bool cancelClientWait) {
  if (closed_) return;
  closed_ = true;
  try {
    const bool waitsForPerson = !answer().wait.is_null();
    const bool timedOut = answer().error && answer().error->code == "timeout";
    if (!finished() && !waitsForPerson &&
        (!keep || timedOut || (cancelClientWait && !answer().clientCalls.empty()))) {
      runs_.cancel(run().id);
    }
    if (!keep && !waitsForPerson) runs_.threads().deleteThread(run().threadId);
  } catch (const std::exception&) {
    // The thread stays (the run finishes on its own); nothing the client can do about it.
  }
}

void followToEnd(RunFollower& run, std::chrono::steady_clock::time_point deadline) {
  while (!run.done())
    run.step(deadline, deadline);
}

}  // namespace parley::service
