// The runs of the Agent Protocol / LangGraph API (docs/service.md): parley's durable runs, on a
// thread or stateless (a thread of their own), answered at once, when they end (wait, join) or
// as a stream of their events (stream, joinStream); multitask_strategy is the double-texting
// policy, an interrupt is a run waiting for an approval or an answer, `command.resume` answers
// it.
#include <algorithm>
#include <span>

#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/stored_thread.hpp"
#include "service/agent_protocol_impl.hpp"
#include "service/webhooks.hpp"
#include "store/thread_metadata.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

bool given(const json& in, const char* key) {
  if (!in.contains(key) || in[key].is_null()) return false;
  const json& v = in[key];
  if ((v.is_array() || v.is_object()) && v.empty()) return false;
  if (v.is_boolean() && !v.get<bool>()) return false;
  if (v.is_number() && v.get<double>() == 0) return false;
  return true;
}

// LangChain's human-in-the-loop answer ({"decisions": [{"type": "approve"}]}, or "reject" with a
// "message") as parley's approval answer; any other answer as it is.
json approvalOfDecisions(const json& value) {
  if (!value.is_object() || !value.contains("decisions")) return value;
  const json& decisions = value["decisions"];
  if (!decisions.is_array() || decisions.size() != 1 || !decisions[0].is_object()) {
    throw apBadRequest("invalid_command",
                       "command.resume.decisions holds one decision: the run waits for one call");
  }
  const std::string type = optionalString(decisions[0], "type", "");
  if (type == "approve") return {{"approved", true}};
  if (type == "reject") {
    json out = {{"approved", false}};
    if (decisions[0].contains("message")) out["message"] = decisions[0]["message"];
    return out;
  }
  throw apBadRequest("invalid_command",
                     "a decision is approve or reject: parley runs the call the model made, "
                     "not an edited one (" +
                         type.substr(0, 32) + ")");
}

std::vector<std::string> streamModeParams(const httplib::Request& req) {
  std::vector<std::string> out;
  const size_t n = req.get_param_value_count("stream_mode");
  for (size_t i = 0; i < n && i < 16; ++i)
    out.push_back(req.get_param_value("stream_mode", i));
  return out;
}

}  // namespace

void AgentProtocol::Impl::createRun(const httplib::Request& req, httplib::Response& res,
                                    bool stateless, Answer answer) {
  const json in = body(req);
  std::string threadId = stateless ? "" : std::string(req.matches[1]);
  if (!stateless) checkId(threadId, "thread");

  // What parley cannot do is refused by name, never ignored.
  for (const char* key : {"model", "interrupt_before", "interrupt_after", "feedback_keys",
                          "after_seconds", "langsmith_tracer"}) {
    if (given(in, key)) {
      throw apBadRequest("unsupported", std::string(key) +
                                            " is not supported by parley (docs/service.md, "
                                            "\"Agent Protocol and the LangGraph API\")");
    }
  }
  // A parley run has no subgraphs: a stream with theirs is the same stream.
  if (in.contains("stream_subgraphs") && !in["stream_subgraphs"].is_null() &&
      !in["stream_subgraphs"].is_boolean()) {
    throw apBadRequest("invalid_stream_subgraphs", "stream_subgraphs is true or false");
  }
  std::string webhook;
  if (given(in, "webhook")) {
    if (!in["webhook"].is_string()) throw apBadRequest("invalid_webhook", "webhook is a URL");
    webhook = in["webhook"].get<std::string>();
    try {
      state.webhooks->checkUrl(webhook);
    } catch (const ValidationError& e) {
      throw apBadRequest("invalid_webhook", e.what());
    }
    std::lock_guard lock(reaperMutex);
    if (watchedRuns.size() >= kMaxStatelessPending) {
      throw ApError(503, "too_many_webhooks",
                    "over " + std::to_string(kMaxStatelessPending) +
                        " runs wait for their end to be posted; try again later");
    }
  }
  SubmitOptions submit;
  if (!in.contains("assistant_id") || !in["assistant_id"].is_string()) {
    throw apBadRequest("invalid_assistant", "assistant_id is required (\"agent\": the default)");
  }
  const std::string assistant = in["assistant_id"].get<std::string>();
  // The assistant's settings first; the run's own config and context over them.
  applyAssistant(assistant, submit, threadId);
  readRunSettings(in.value("config", json()), in.value("context", json()), submit, threadId);
  json metadata = in.value("metadata", json());
  checkMetadata(metadata, "metadata");
  if (!metadata.is_object()) metadata = json::object();
  metadata["assistant_id"] = assistant;
  submit.metadata = metadata;
  if (given(in, "multitask_strategy")) {
    if (!in["multitask_strategy"].is_string()) {
      throw apBadRequest("invalid_multitask_strategy", "multitask_strategy is a string");
    }
    auto policy = parseDoubleTextPolicy(in["multitask_strategy"].get<std::string>());
    if (!policy) {
      throw apBadRequest("invalid_multitask_strategy",
                         "multitask_strategy is reject, interrupt, rollback or enqueue");
    }
    submit.policy = *policy;
  }
  const std::string ifNotExists = optionalString(in, "if_not_exists", "reject");
  if (ifNotExists != "reject" && ifNotExists != "create") {
    throw apBadRequest("invalid_if_not_exists", "if_not_exists is reject or create");
  }
  const std::string onCompletion =
      optionalString(in, "on_completion", stateless ? "delete" : "keep");
  if (onCompletion != "delete" && onCompletion != "keep") {
    throw apBadRequest("invalid_on_completion", "on_completion is delete or keep");
  }
  if (!stateless && onCompletion == "delete") {
    throw apBadRequest("invalid_on_completion",
                       "on_completion applies to stateless runs (POST /runs...); delete the "
                       "thread to delete a thread's run");
  }
  const std::string onDisconnect = optionalString(in, "on_disconnect", "continue");
  if (onDisconnect != "continue" && onDisconnect != "cancel") {
    throw apBadRequest("invalid_on_disconnect", "on_disconnect is continue or cancel");
  }
  if (onDisconnect == "cancel" && answer != Answer::Stream) {
    throw apBadRequest("invalid_on_disconnect",
                       "on_disconnect cancel needs a stream (runs.stream) to watch");
  }
  const StreamModes modes = parseStreamModes(in.value("stream_mode", json()));
  submit.stream = modes.messages || modes.messagesTuple || modes.events;

  // The input: messages; or a command answering the thread's interrupt.
  std::vector<Message> input;
  const json command = in.value("command", json());
  std::optional<json> resume;
  if (!command.is_null()) {
    if (!command.is_object()) throw apBadRequest("invalid_command", "command must be an object");
    for (const auto& [key, value] : command.items()) {
      if (key == "resume") {
        resume = value;
      } else if (!value.is_null() && !(value.is_structured() && value.empty())) {
        throw apBadRequest("unsupported",
                           "command." + key.substr(0, 64) +
                               " is not supported: a parley run has no graph to go to or "
                               "update; command.resume answers its interrupt");
      }
    }
  }
  const json input0 = in.value("input", json());
  if (!input0.is_null()) {
    if (!input0.is_object()) throw apBadRequest("invalid_input", "input must be an object");
    for (const auto& [key, value] : input0.items()) {
      if (key != "messages") {
        throw apBadRequest("invalid_input", "input." + key.substr(0, 64) +
                                                " is not parley's state: input is {\"messages\": "
                                                "[...]}");
      }
      if (!value.is_array()) throw apBadRequest("invalid_input", "input.messages is a list");
      for (size_t i = 0; i < value.size(); ++i)
        input.push_back(
            fromLangGraphMessage(value[i], "input.messages[" + std::to_string(i) + "]"));
    }
  }
  if (resume && !input.empty()) {
    throw apBadRequest("invalid_input", "give input or command.resume, not both");
  }
  const std::optional<std::pair<size_t, size_t>> checkpoint = runCheckpoint(in);
  if (!resume && input.empty() && !checkpoint) {
    throw apBadRequest("invalid_input", "input.messages is required (one message at least)");
  }

  if (checkpoint && stateless) {
    throw apBadRequest("invalid_checkpoint", "a stateless run starts on a thread of its own");
  }

  RunInfo run;
  int64_t after = 0;
  if (resume) {
    if (stateless) throw apBadRequest("invalid_command", "a stateless run has no interrupt");
    mustThread(threadId);
    const ThreadStatus status = threadStatus(threadId);
    if (!status.waiting || !status.waiting->response.is_null()) {
      throw apConflict("run_not_waiting",
                       "thread '" + threadId + "' has no interrupted run to resume");
    }
    if (checkpoint) startFromCheckpoint(threadId, *checkpoint, true, false);
    json value = *resume;
    // {interrupt id: value}, as LangGraph's clients may send it.
    const std::string interruptId = status.waiting->wait.value("tool_call_id", "");
    if (value.is_object() && value.size() == 1 && value.contains(interruptId)) {
      value = value[interruptId];
    }
    if (status.waiting->wait.value("kind", "") == "approval") value = approvalOfDecisions(value);
    after = runs.lastEventSeqs(std::span<const std::string>(&threadId, 1)).front().value_or(0);
    run = runs.respond(status.waiting->id, value);
  } else {
    if (stateless) {
      ThreadOptions own;
      own.metadata = {
          {"stateless", true}, {"graph_id", graphOf(assistant)}, {"assistant_id", assistant}};
      threadId = runs.threads().createThread(own).id;
    } else if (!runs.threads().threadInfo(threadId)) {
      if (ifNotExists != "create") {
        throw apNotFound("no thread '" + threadId + "' (if_not_exists: create makes it)");
      }
      if (checkpoint) throw apNotFound("no thread '" + threadId + "' to take a checkpoint of");
      // Made here with its assistant in its metadata: one write, not a second for the note.
      ThreadOptions made;
      made.id = threadId;
      made.metadata = {{"graph_id", graphOf(assistant)}, {"assistant_id", assistant}};
      try {
        runs.threads().createThread(made);
      } catch (const StoreError&) {
        if (!runs.threads().threadInfo(threadId)) throw;  // else made by another request meanwhile
      }
    } else if (checkpoint) {
      // Without input the state's own last message is the input: a reply regenerated.
      std::vector<Message> last = startFromCheckpoint(threadId, *checkpoint, false, input.empty());
      if (input.empty()) input = std::move(last);
    }
    after = runs.lastEventSeqs(std::span<const std::string>(&threadId, 1)).front().value_or(0);
    run = runs.submit(threadId, input, submit);
    if (!stateless && run.status != RunStatus::Rejected) noteAssistant(threadId, assistant);
    if (run.status == RunStatus::Rejected) {
      if (stateless) runs.threads().deleteThread(threadId);
      throw apConflict(
          "run_rejected",
          "thread '" + threadId + "' is busy and multitask_strategy is reject: " + run.error);
    }
  }
  const std::string location = "/threads/" + threadId + "/runs/" + run.id;
  res.set_header("Content-Location", location);
  const WatchedRun watched{threadId, run.id, stateless && onCompletion == "delete", webhook};
  const bool settle = watched.reap || !watched.webhook.empty();
  switch (answer) {
    case Answer::Run:
      if (settle) settleWhenFinished(watched);
      sendApJson(res, 200, runJson(run));
      return;
    case Answer::Wait: {
      const RunInfo done = awaitRun(threadId, run.id);
      sendApJson(res, 200, finalValues(done));
      if (settle) settleWhenFinished(watched);
      return;
    }
    case Answer::Stream: {
      res.set_header("Location", location + "/stream");
      std::function<void(bool)> onClose;
      if (settle) {
        onClose = [this, watched](bool) { settleWhenFinished(watched); };
      }
      // A resumed run is read from the thread's first event, so that its state is whole; what
      // came before the answer is not sent again.
      std::optional<StreamPosition> from;
      if (resume) from = StreamPosition{after, -1};
      streamRun(res, threadId, run.id, modes, resume ? 0 : after, from, true,
                onDisconnect == "cancel", onClose);
      return;
    }
  }
}

void AgentProtocol::Impl::settleWhenFinished(const WatchedRun& watched) {
  try {
    if (settleRun(watched)) return;
  } catch (const std::exception& e) {
    log("parley serve: the end of run " + watched.runId + ": " + e.what());
    return;
  }
  {
    std::lock_guard lock(reaperMutex);
    if (watchedRuns.size() >= kMaxStatelessPending) {
      log("parley serve: over " + std::to_string(kMaxStatelessPending) +
          " runs wait for their end; run " + watched.runId +
          " is not followed (its thread kept, no webhook)");
      return;
    }
    watchedRuns.push_back(watched);
  }
  reaperWake.notify_all();
}

bool AgentProtocol::Impl::settleRun(const WatchedRun& watched) {
  auto run = runs.run(watched.runId);
  if (run && !isFinished(run->status)) return false;
  if (run && !watched.webhook.empty()) sendRunWebhook(*run, watched.webhook);
  if (watched.reap) runs.threads().deleteThread(watched.threadId);
  return true;
}

void AgentProtocol::Impl::sendRunWebhook(const RunInfo& run, const std::string& url) {
  json body = runJson(run);
  try {
    body["values"] = values(run.threadId, view(run.threadId));
  } catch (const StoreError&) {
    body["values"] = nullptr;  // the thread went meanwhile
  }
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > state.webhooks->options().maxBodyBytes) {
    // The run without its values rather than nothing: the receiver can read them.
    body.erase("values");
    body["values_omitted"] = true;
    text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  state.webhooks->send({url, "run.completed", std::move(text)});
}

RunInfo AgentProtocol::Impl::awaitRun(const std::string& threadId, const std::string& runId) {
  // A waiting run that was answered goes on: not done yet.
  auto done = [](const RunInfo& r) {
    return isFinished(r.status) || (r.status == RunStatus::Waiting && r.response.is_null());
  };
  RunInfo run = mustRun(threadId, runId);
  if (done(run)) return run;
  if (state.feeds->streams() >= options.maxStreams) {
    throw ApError(503, "too_many_streams",
                  "the service follows " + std::to_string(options.maxStreams) +
                      " runs and streams at most; try again later");
  }
  int64_t after =
      runs.lastEventSeqs(std::span<const std::string>(&run.threadId, 1)).front().value_or(0);
  auto feed = state.feeds->subscribe(run.threadId, after);
  struct Leave {
    EventFeeds* feeds;
    EventFeeds::Subscription feed;
    ~Leave() { feeds->unsubscribe(feed); }
  } leave{state.feeds.get(), feed};
  for (;;) {
    run = mustRun(threadId, runId);
    if (done(run)) return run;
    auto batch =
        state.feeds->next(feed, after, std::chrono::steady_clock::now() + options.heartbeat);
    if (batch.ended) return mustRun(threadId, runId);
    after = batch.last;
  }
}

json AgentProtocol::Impl::finalValues(const RunInfo& run) {
  json out = values(run.threadId, view(run.threadId));
  if (run.status == RunStatus::Waiting) {
    out["__interrupt__"] = json::array({langGraphInterrupt(run.wait)});
  } else if (run.status == RunStatus::Failed) {
    out["__error__"] = {{"error", "RunError"}, {"message", run.error}};
  }
  return out;
}

void AgentProtocol::Impl::streamRun(httplib::Response& res, const std::string& threadId,
                                    const std::string& runId, StreamModes modes, int64_t after,
                                    std::optional<StreamPosition> resume, bool metadata,
                                    bool cancelOnDisconnect,
                                    std::function<void(bool ended)> onClose) {
  if (state.feeds->streams() >= options.maxStreams) {
    throw ApError(503, "too_many_streams",
                  "the service serves " + std::to_string(options.maxStreams) +
                      " event streams at most (ServiceOptions::maxStreams); try again later");
  }
  auto encoder = std::make_shared<RunStreamEncoder>(threadId, runId, modes, view(threadId).messages,
                                                    resume, metadata);
  auto feed = state.feeds->subscribe(threadId, after);
  state.metrics.streamOpened();
  struct Stream {
    int64_t after;
    bool greeted = false;
    bool ended = false;
  };
  auto stream = std::make_shared<Stream>(Stream{after});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, threadId, runId, feed, stream, encoder](size_t, httplib::DataSink& sink) {
        if (stream->ended) {
          sink.done();
          return true;
        }
        std::string out;
        if (!stream->greeted) {
          stream->greeted = true;
          out = encoder->start();
        }
        // Read on until there is something to send: the events of other runs send nothing.
        for (;;) {
          std::vector<StoredEvent> events;
          try {
            events = runs.readEvents(threadId, stream->after, 256);
          } catch (const StoreError&) {
            if (!runs.threads().threadInfo(threadId)) {  // deleted under the stream
              sink.done();
              return true;
            }
            throw;
          } catch (const std::exception& e) {
            log("parley serve: reading events of a thread: " + std::string(e.what()));
            return false;
          }
          for (const auto& e : events) {
            out += encoder->feed(e);
            stream->after = e.seq;
            if (encoder->done() && e.type == "run_waiting" &&
                answeredAfter(threadId, runId, e.seq)) {
              encoder->goOn();  // an old wait, answered since: the run went on
            }
            if (encoder->done()) break;
          }
          if (encoder->done()) {
            out += RunStreamEncoder::end();
            stream->ended = true;
          }
          if (!out.empty()) {
            state.metrics.eventsSent(1);
            return sink.write(out.data(), out.size());
          }
          if (!events.empty()) continue;
          const auto deadline = std::chrono::steady_clock::now() + options.heartbeat;
          auto batch = state.feeds->next(feed, stream->after, deadline);
          if (batch.parked) return true;  // called again when there is news
          if (batch.ended) {
            sink.done();
            return true;
          }
          if (batch.texts.empty()) {
            const std::string beat = ": heartbeat\n\n";
            return sink.write(beat.data(), beat.size());
          }
        }
      },
      [this, feed, stream, runId, cancelOnDisconnect, onClose = std::move(onClose)](bool) {
        state.feeds->unsubscribe(feed);
        state.metrics.streamClosed();
        if (onClose) onClose(stream->ended);
        if (!stream->ended && cancelOnDisconnect) {
          try {
            runs.cancel(runId);
          } catch (const std::exception& e) {
            log("parley serve: cancelling run " + runId + " on disconnect: " + e.what());
          }
        }
      });
}

bool AgentProtocol::Impl::answeredAfter(const std::string& threadId, const std::string& runId,
                                        int64_t seq) {
  for (int64_t after = seq;;) {
    auto events = runs.readEvents(threadId, after, 1'000);
    if (events.empty()) return false;
    for (const auto& e : events)
      if (e.runId == runId && e.type == "run_responded") return true;
    after = events.back().seq;
  }
}

void AgentProtocol::Impl::joinStream(const httplib::Request& req, httplib::Response& res,
                                     bool stateless) {
  const std::string runId = stateless ? req.matches[1] : req.matches[2];
  const RunInfo run = mustRun(stateless ? "" : std::string(req.matches[1]), runId);
  if (!stateless) mustThread(run.threadId);
  const StreamModes modes = joinModes(req);
  const std::optional<StreamPosition> resume = joinPosition(req);
  const std::string cancel = req.get_param_value("cancel_on_disconnect");
  // From the thread's first event: the run's state is rebuilt as the first time it was sent.
  streamRun(res, run.threadId, run.id, modes, 0, resume, !resume,
            cancel == "1" || cancel == "true");
}

void AgentProtocol::Impl::threadStream(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  const StreamModes modes = joinModes(req);
  const std::optional<StreamPosition> resume = joinPosition(req);
  std::optional<RunInfo> current;
  for (RunStatus status : {RunStatus::Running, RunStatus::Waiting, RunStatus::Queued}) {
    RunListOptions list;
    list.threadId = info.id;
    list.status = status;
    list.limit = 1;
    auto found = runs.listRuns(list);
    if (!found.empty()) {
      current = found.front();
      break;
    }
  }
  if (!current) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(RunStreamEncoder::end(), "text/event-stream");
    return;
  }
  streamRun(res, info.id, current->id, modes, 0, resume, !resume, false);
}

StreamModes AgentProtocol::Impl::joinModes(const httplib::Request& req) const {
  json modesJson = json::array();
  for (const auto& value : streamModeParams(req)) {
    if (!value.empty() && value.front() == '[') {
      json list = json::parse(value, nullptr, false);
      if (!list.is_array()) throw apBadRequest("invalid_stream_mode", "stream_mode: a JSON list");
      for (const auto& m : list)
        modesJson.push_back(m);
    } else {
      modesJson.push_back(value);
    }
  }
  if (modesJson.empty()) modesJson = {"values", "updates", "messages-tuple"};
  return parseStreamModes(modesJson);
}

std::optional<StreamPosition> AgentProtocol::Impl::joinPosition(const httplib::Request& req) const {
  const std::string lastId = req.get_header_value("Last-Event-ID");
  if (lastId.empty()) return std::nullopt;
  auto resume = parseStreamPosition(lastId);
  if (!resume) throw apBadRequest("invalid_last_event_id", "Last-Event-ID is not one we sent");
  return resume;
}

void AgentProtocol::Impl::listRuns(const httplib::Request& req, httplib::Response& res) {
  const ThreadInfo info = mustThread(req.matches[1]);
  auto number = [&](const char* name, size_t byDefault) -> json {
    if (!req.has_param(name)) return json(byDefault);
    const std::string text = req.get_param_value(name);
    json n = json::parse(text, nullptr, false);
    if (!n.is_number_integer())
      throw apBadRequest("invalid_" + std::string(name), text.substr(0, 32));
    return n;
  };
  const size_t limit = pageLimit(number("limit", 10), 10);
  const size_t offset = pageOffset(number("offset", 0));
  std::string status = req.get_param_value("status");
  // Every run of the thread (at most kMaxSearchScan), newest first.
  std::vector<RunInfo> all;
  RunListOptions list;
  list.threadId = info.id;
  list.limit = std::min<size_t>(options.maxPage, runs.options().limits.maxPage);
  for (;;) {
    auto page = runs.listRuns(list);
    all.insert(all.end(), page.begin(), page.end());
    if (page.size() < list.limit || all.size() >= kMaxSearchScan) break;
    list.offset += page.size();
  }
  std::reverse(all.begin(), all.end());
  json out = json::array();
  size_t skipped = 0;
  for (const auto& run : all) {
    if (!status.empty() && langGraphRunStatus(run.status) != status) continue;
    if (skipped++ < offset) continue;
    if (out.size() >= limit) break;
    out.push_back(runJson(run));
  }
  sendApJson(res, 200, out);
}

void AgentProtocol::Impl::getRun(const httplib::Request& req, httplib::Response& res) {
  sendApJson(res, 200, runJson(mustRun(req.matches[1], req.matches[2])));
}

void AgentProtocol::Impl::deleteRun(const httplib::Request& req, httplib::Response&) {
  mustRun(req.matches[1], req.matches[2]);
  throw apBadRequest("unsupported",
                     "a parley run stays with its thread (its events are the thread's log); "
                     "delete the thread, or cancel the run");
}

void AgentProtocol::Impl::cancelRun(const httplib::Request& req, httplib::Response& res) {
  const RunInfo run = mustRun(req.matches[1], req.matches[2]);
  const std::string action =
      req.has_param("action") ? req.get_param_value("action") : std::string("interrupt");
  if (action != "interrupt") {
    throw apBadRequest("unsupported",
                       "cancel action '" + action.substr(0, 32) +
                           "': a run is cancelled keeping its whole turns (interrupt); "
                           "multitask_strategy rollback rolls a thread back");
  }
  RunInfo after = runs.cancel(run.id);
  const std::string wait = req.get_param_value("wait");
  if (wait == "1" || wait == "true") after = awaitRun(run.threadId, run.id);
  sendApJson(res, 200, runJson(after));
}

void AgentProtocol::Impl::joinRun(const httplib::Request& req, httplib::Response& res) {
  const RunInfo run = mustRun(req.matches[1], req.matches[2]);
  sendApJson(res, 200, finalValues(awaitRun(run.threadId, run.id)));
}

void AgentProtocol::Impl::reap() {
  std::unique_lock lock(reaperMutex);
  while (!stopping) {
    reaperWake.wait_for(lock, std::chrono::milliseconds(500));
    if (stopping) break;
    std::deque<WatchedRun> pending;
    pending.swap(watchedRuns);
    lock.unlock();
    std::deque<WatchedRun> keep;
    for (auto& watched : pending) {
      try {
        if (!settleRun(watched)) keep.push_back(std::move(watched));
      } catch (const std::exception& e) {
        log("parley serve: the end of run " + watched.runId + ": " + e.what());
      }
    }
    lock.lock();
    for (auto& item : keep)
      watchedRuns.push_back(std::move(item));
  }
}

std::optional<std::pair<size_t, size_t>> AgentProtocol::Impl::runCheckpoint(const json& in) const {
  std::string id;
  if (in.contains("checkpoint") && !in["checkpoint"].is_null()) {
    const json& given = in["checkpoint"];
    if (!given.is_object()) throw apBadRequest("invalid_checkpoint", "checkpoint is an object");
    const std::string ns = optionalString(given, "checkpoint_ns", "");
    if (!ns.empty()) {
      throw apBadRequest("invalid_checkpoint",
                         "checkpoint_ns: a parley thread has no subgraphs, so no namespaces");
    }
    id = optionalString(given, "checkpoint_id", "");
  }
  const std::string other = optionalString(in, "checkpoint_id", "");
  if (!other.empty()) {
    if (!id.empty() && other != id) {
      throw apBadRequest("invalid_checkpoint", "checkpoint and checkpoint_id name two states");
    }
    id = other;
  }
  if (id.empty()) return std::nullopt;
  auto at = parseCheckpoint(id);
  if (!at) {
    throw apBadRequest("invalid_checkpoint",
                       "'" + id.substr(0, 64) +
                           "' is not a checkpoint of parley (b<batch>-n<messages>, as a "
                           "thread's states give it)");
  }
  return at;
}

std::vector<Message> AgentProtocol::Impl::startFromCheckpoint(const std::string& threadId,
                                                              std::pair<size_t, size_t> at,
                                                              bool resume, bool takeLastUser) {
  const auto name = [](size_t batch, size_t size) {
    return "b" + std::to_string(batch) + "-n" + std::to_string(size);
  };
  ConversationManager manager;
  const auto version = loadConversation(runs.threads(), threadId, manager);
  const size_t batch = manager.getMarkMap().currentBatch;
  const size_t size = manager.storageSize();
  const bool latest = at.first == batch && at.second == size;
  if (latest && !takeLastUser) return {};  // a run as any
  if (at.first > batch || at.second > size) {
    throw apNotFound("no checkpoint " + name(at.first, at.second) + " in thread '" + threadId +
                     "' (its latest is " + name(batch, size) + ")");
  }
  if (resume) {
    if (latest) return {};
    throw apConflict("checkpoint_not_latest",
                     "an interrupt is resumed at the thread's latest state " + name(batch, size) +
                         ", not at " + name(at.first, at.second));
  }
  if (auto busy = state.unfinishedRun(threadId)) {
    // The latest state a client saw before the run under way added its messages (useStream
    // sends the head it read with the next message, while the run may have begun): the new run
    // goes after it, as any.
    if (!takeLastUser && at.first == batch && busy->baseMessageCount &&
        at.second >= static_cast<size_t>(*busy->baseMessageCount)) {
      return {};
    }
    throw apConflict("thread_busy", "thread '" + threadId + "' has an unfinished run '" + busy->id +
                                        "': a run starts from an earlier state once "
                                        "it finished");
  }
  // The checkpoint's view: its batch's view over the first n stored messages.
  std::vector<MessageStore::Index> view;
  {
    ConversationManager then = manager.clone();
    if (at.first < batch) then.rollbackToBatch(at.first);
    for (size_t index : then.getMarkMap().originalIndices)
      if (index < at.second) view.push_back(static_cast<MessageStore::Index>(index));
  }
  std::vector<Message> input;
  if (takeLastUser) {
    const std::vector<Message> stored = manager.getAllMessages();
    const Message* last = view.empty() ? nullptr : &stored[view.back()];
    if (!last || last->role != Role::User) {
      throw apBadRequest("invalid_input",
                         "input.messages is required, unless the checkpoint's state ends with "
                         "the user's message (which the run then answers again)");
    }
    input.push_back(*last);
    view.pop_back();
  }
  try {
    manager.modifyStore([&](MessageStore& store) {
      if (!pairingViolations(store, view).empty()) {
        throw ValidationError("checkpoint", "the state " + name(at.first, at.second) +
                                                " cuts a tool call from its result");
      }
      store.commitView(view);
    });
    saveConversation(runs.threads(), threadId, manager, version);
  } catch (const ValidationError& e) {
    throw apBadRequest("invalid_checkpoint", e.what());
  } catch (const StoreConflict&) {
    throw apConflict("thread_changed", "thread '" + threadId + "' changed meanwhile; try again");
  }
  return input;
}

std::string AgentProtocol::Impl::graphOf(const std::string& assistantId) const {
  if (auto made = assistants().created(assistantId)) return made->current.graphId;
  return assistantId;
}

void AgentProtocol::Impl::noteAssistant(const std::string& threadId,
                                        const std::string& assistantId) {
  auto info = runs.threads().threadInfo(threadId);
  if (!info) return;
  json metadata = info->metadata.is_object() ? info->metadata : json::object();
  const std::string graph = graphOf(assistantId);
  if (metadata.value("graph_id", json()) == graph &&
      metadata.value("assistant_id", json()) == assistantId) {
    return;
  }
  metadata["graph_id"] = graph;
  metadata["assistant_id"] = assistantId;
  try {
    checkMetadata(metadata, "the thread's metadata");
    detail::setThreadMetadata(runs.threads(), threadId, metadata);
  } catch (const std::exception& e) {
    // The run is submitted; a thread whose metadata is at its cap keeps it as it was.
    log("parley serve: thread " + threadId + "'s metadata keeps no assistant: " + e.what());
  }
}

}  // namespace parley::service
