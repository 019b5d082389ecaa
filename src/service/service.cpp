// The HTTP routes of `parley serve` (docs/service.md): threads, runs, event streams, health,
// metrics and the chat page, behind the checks of admission.hpp and the front of src/http/.
// Over 600 lines: the fourteen routes with their readers; splitting them by resource is the
// rest of issue 32's "hosts as small parts".
#include "service/service.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>

#include "http/server.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/logger.hpp"
#include "parley/otlp.hpp"
#include "parley/stored_thread.hpp"
#include "parley/telemetry.hpp"
#include "service/admission.hpp"
#include "service/chat_page.hpp"
#include "service/event_feeds.hpp"
#include "service/metrics.hpp"

namespace parley {

using json = nlohmann::json;
using service::EventFeeds;
using service::ServiceMetrics;

namespace {

// Thrown by a handler; becomes {"error": {"message", "type", "code"}} with `status`.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string type;
  std::string code;
};

json errorBody(const std::string& message, const std::string& type, const std::string& code) {
  return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

void sendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void sendError(httplib::Response& res, const ApiError& e) {
  sendJson(res, e.status, errorBody(e.what(), e.type, e.code));
}

ApiError notFound(const std::string& what) {
  return ApiError(404, "not_found_error", "not_found", what);
}
ApiError badRequest(const std::string& code, const std::string& what) {
  return ApiError(400, "invalid_request_error", code, what);
}
ApiError conflict(const std::string& code, const std::string& what) {
  return ApiError(409, "conflict_error", code, what);
}

std::optional<int64_t> parseInt(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

struct Service::Impl {
  std::shared_ptr<RunStore> runs;
  ServiceOptions options;
  std::unique_ptr<http::Server> server;  // made by install()
  std::unique_ptr<EventFeeds> feeds;
  service::Admission admission;
  // /healthz: the last integrity check's time and its failure ("" when it passed).
  std::mutex healthMutex;
  std::chrono::steady_clock::time_point checkedAt{};
  bool checked = false;
  std::string damage;
  ServiceMetrics metrics;
  std::atomic<bool> stopping{false};
  bool started = false;
  std::atomic<int> port{0};
  std::mutex stopMutex;

  Impl(std::shared_ptr<RunStore> r, ServiceOptions o)
      : runs(std::move(r)), options(std::move(o)), admission(options) {
    feeds = std::make_unique<EventFeeds>(runs, options.maxEventBytes, 4'096, options.log);
  }

  void log(const std::string& line) const { writeLog(options.log, line); }

  // --- checks ---------------------------------------------------------------------------------

  void checkId(const std::string& id, const char* what) const {
    if (id.empty() || id.size() > options.maxIdBytes) {
      throw badRequest("invalid_id", std::string(what) + " id must be 1 to " +
                                         std::to_string(options.maxIdBytes) + " bytes");
    }
    for (char c : id) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == ':';
      if (!ok) {
        throw badRequest("invalid_id",
                         std::string(what) + " id may hold only letters, digits and - _ . :");
      }
    }
  }

  json body(const httplib::Request& req) const {
    if (req.body.empty()) return json::object();
    json value = parseJson(req.body, {}, /*allowExceptions=*/false);
    if (value.is_discarded() || !value.is_object()) {
      throw badRequest("invalid_json", "the request body must be a JSON object");
    }
    return value;
  }

  ThreadInfo mustThread(const std::string& id) const {
    checkId(id, "thread");
    auto info = runs->threads().threadInfo(id);
    if (!info) throw notFound("no thread '" + id + "'");
    return *info;
  }

  // The "id" a body gives a new thread (checked, and not taken), or "" to generate one.
  std::string newThreadId(const json& in) const {
    if (!in.contains("id")) return "";
    if (!in["id"].is_string()) throw badRequest("invalid_id", "id must be a string");
    std::string id = in["id"].get<std::string>();
    checkId(id, "thread");
    if (runs->threads().threadInfo(id))
      throw conflict("thread_exists", "thread '" + id + "' exists");
    return id;
  }

  RunInfo mustRun(const std::string& id) const {
    checkId(id, "run");
    auto run = runs->run(id);
    if (!run) throw notFound("no run '" + id + "'");
    return *run;
  }

  // The unfinished run of a thread, if any: a context operation must not race its worker.
  std::optional<RunInfo> unfinishedRun(const std::string& threadId) const {
    for (RunStatus status : {RunStatus::Running, RunStatus::Waiting, RunStatus::Queued}) {
      RunListOptions list;
      list.threadId = threadId;
      list.status = status;
      list.limit = 1;
      auto found = runs->listRuns(list);
      if (!found.empty()) return found.front();
    }
    return std::nullopt;
  }

  // The thread as the chat page and clients read it: the visible messages and the batch.
  json threadView(const std::string& id) const {
    ConversationManager manager;
    const auto version = loadConversation(runs->threads(), id, manager);
    auto info = runs->threads().threadInfo(id);
    if (!info) throw notFound("no thread '" + id + "'");
    json out = toJson(*info);
    out["object"] = "thread";
    out["version"] = version;
    // Each message with its storage index, which the message_added events carry too: a client
    // that reads the thread and then the stream recognises a message it has.
    const auto marks = manager.getMarkMap();
    const auto visible = manager.getMessages();
    json messages = json::array();
    for (size_t i = 0; i < visible.size(); ++i) {
      json m = toJson(visible[i]);
      m["index"] = marks.originalIndices.at(i);
      messages.push_back(std::move(m));
    }
    out["messages"] = std::move(messages);
    out["batch"] = marks.currentBatch;
    out["storage_size"] = manager.storageSize();
    return out;
  }

  // The GenAI and run-queue metrics of the OTLP exporter, when one is installed
  // (docs/telemetry.md).
  static std::string telemetryMetrics() {
    auto exporter = std::dynamic_pointer_cast<OtlpExporter>(telemetry());
    return exporter ? exporter->prometheusText() : std::string();
  }

  // The attributes of a request's span, set as it ends (HTTP server conventions).
  struct RequestSpanEnd {
    Span& span;
    const httplib::Request& req;
    httplib::Response& res;
    ~RequestSpanEnd() {
      if (!span.recording()) return;
      span.set("http.request.method", req.method);
      span.set("url.path", req.path);
      span.set("http.response.status_code", res.status);
      if (res.status >= 500) span.setError(std::to_string(res.status), "");
    }
  };

  // --- routes ---------------------------------------------------------------------------------

  void createThread(const httplib::Request& req, httplib::Response& res) {
    json in = body(req);
    ThreadOptions options;
    options.id = newThreadId(in);
    if (in.contains("title")) {
      if (!in["title"].is_string()) throw badRequest("invalid_title", "title must be a string");
      options.title = in["title"].get<std::string>();
    }
    if (in.contains("metadata")) options.metadata = in["metadata"];
    std::vector<Message> messages;
    if (in.contains("system") && !in["system"].is_null()) {
      if (!in["system"].is_string() || in["system"].get<std::string>().empty()) {
        throw badRequest("invalid_system", "system must be a non-empty string");
      }
      messages.push_back(Message::system(in["system"].get<std::string>()));
    }
    const ThreadInfo info = runs->threads().createThread(options, messages);
    sendJson(res, 201, threadView(info.id));
  }

  void listThreads(const httplib::Request& req, httplib::Response& res) {
    ThreadListOptions list;
    list.limit = 20;
    if (req.has_param("limit")) {
      auto n = parseInt(req.get_param_value("limit"));
      if (!n || *n < 1 || static_cast<size_t>(*n) > options.maxPage) {
        throw badRequest("invalid_limit", "limit must be 1 to " + std::to_string(options.maxPage));
      }
      list.limit = static_cast<size_t>(*n);
    }
    if (req.has_param("offset")) {
      auto n = parseInt(req.get_param_value("offset"));
      if (!n || *n < 0) throw badRequest("invalid_offset", "offset must be a non-negative integer");
      list.offset = static_cast<size_t>(*n);
    }
    const size_t wanted = list.limit;
    ++list.limit;  // one more says whether there is a next page
    auto threads = runs->threads().listThreads(list);
    const bool more = threads.size() > wanted;
    if (more) threads.pop_back();
    json data = json::array();
    for (const auto& info : threads) {
      json t = toJson(info);
      t["object"] = "thread";
      data.push_back(std::move(t));
    }
    sendJson(res, 200, {{"object", "list"}, {"data", data}, {"has_more", more}});
  }

  void getThread(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    mustThread(id);
    sendJson(res, 200, threadView(id));
  }

  void deleteThread(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    checkId(id, "thread");
    if (!runs->threads().deleteThread(id)) throw notFound("no thread '" + id + "'");
    sendJson(res, 200, {{"id", id}, {"object", "thread.deleted"}, {"deleted", true}});
  }

  void forkThread(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const ThreadInfo parent = mustThread(id);
    json in = body(req);
    int64_t position = parent.messageCount;
    if (in.contains("position")) {
      if (!in["position"].is_number_integer()) {
        throw badRequest("invalid_position", "position must be an integer");
      }
      position = in["position"].get<int64_t>();
      if (position < 0 || position > parent.messageCount) {
        throw badRequest("invalid_position", "position must be 0 to " +
                                                 std::to_string(parent.messageCount) +
                                                 " (the thread's stored messages)");
      }
    }
    ThreadOptions options;
    options.id = newThreadId(in);
    options.title = parent.title;
    const ThreadInfo fork = runs->threads().forkThread(id, position, options);
    sendJson(res, 201, threadView(fork.id));
  }

  void operations(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    mustThread(id);
    json in = body(req);
    json list = in.contains("operations") ? in["operations"] : json::array({in});
    if (!list.is_array() || list.empty() || list.size() > 100) {
      throw badRequest("invalid_operations", "operations must be an array of 1 to 100 operations");
    }
    if (auto run = unfinishedRun(id)) {
      throw conflict("thread_busy", "thread '" + id + "' has an unfinished run '" + run->id +
                                        "' (" + std::string(toString(run->status)) +
                                        "); operate on it once it finished");
    }
    ConversationManager manager;
    const auto version = loadConversation(runs->threads(), id, manager);
    json results = json::array();
    for (size_t i = 0; i < list.size(); ++i) {
      const json& op = list[i];
      try {
        if (op.is_object() && op.value("operation", "") == "undo") {
          // The chat page's undo: back to the view before the last operation.
          const size_t batch = manager.getMarkMap().currentBatch;
          if (batch == 0) throw ValidationError("operation", "nothing to undo");
          manager.rollbackToBatch(batch - 1);
          results.push_back({{"operation", "undo"}, {"message_count", manager.getMessageCount()}});
          continue;
        }
        const auto result = applyContextOperation(manager, parseContextOperation(op));
        results.push_back({{"operation", result.operation},
                           {"message_count", result.messageCount},
                           {"removed_for_pairing", result.removedForPairing}});
      } catch (const ValidationError& e) {
        throw badRequest("invalid_operation", "operations[" + std::to_string(i) + "]: " + e.what());
      }
    }
    try {
      saveConversation(runs->threads(), id, manager, version);
    } catch (const StoreConflict&) {
      throw conflict("thread_changed", "thread '" + id + "' changed meanwhile; try again");
    }
    json out = threadView(id);
    out["results"] = results;
    sendJson(res, 200, out);
  }

  void submit(const httplib::Request& req, httplib::Response& res) {
    const std::string threadId = req.matches[1];
    checkId(threadId, "thread");
    json in = body(req);
    std::vector<Message> input;
    if (!in.contains("input")) throw badRequest("invalid_input", "input is required");
    const json& given = in["input"];
    if (given.is_string()) {
      if (given.get<std::string>().empty()) throw badRequest("invalid_input", "input is empty");
      input.push_back(Message::user(given.get<std::string>()));
    } else if (given.is_array() && !given.empty()) {
      for (size_t i = 0; i < given.size(); ++i) {
        try {
          input.push_back(messageFromJson(given[i]));
        } catch (const std::exception& e) {
          throw badRequest("invalid_input", "input[" + std::to_string(i) + "]: " + e.what());
        }
      }
    } else {
      throw badRequest("invalid_input", "input must be a string or an array of messages");
    }
    SubmitOptions options;
    options.stream = true;
    auto text = [&](const char* key, std::string& into) {
      if (!in.contains(key) || in[key].is_null()) return;
      if (!in[key].is_string())
        throw badRequest("invalid_" + std::string(key), std::string(key) + " must be a string");
      into = in[key].get<std::string>();
    };
    if (in.contains("policy")) {
      auto policy = in["policy"].is_string()
                        ? parseDoubleTextPolicy(in["policy"].get<std::string>())
                        : std::nullopt;
      if (!policy) {
        throw badRequest("invalid_policy", "policy must be enqueue, reject, interrupt or rollback");
      }
      options.policy = *policy;
    }
    text("id", options.id);
    if (!options.id.empty()) checkId(options.id, "run");
    text("profile", options.profile);
    if (in.contains("system") && !in["system"].is_null()) {
      std::string system;
      text("system", system);
      options.systemPrompt = system;
    }
    if (in.contains("stream")) {
      if (!in["stream"].is_boolean())
        throw badRequest("invalid_stream", "stream must be a boolean");
      options.stream = in["stream"].get<bool>();
    }
    if (in.contains("max_iterations")) {
      // Range-checked as 64 bits: get<int>() wrapped 4294967297 to 1.
      const nlohmann::json& value = in["max_iterations"];
      constexpr int64_t kMost = std::numeric_limits<int>::max();
      const bool inRange =
          value.is_number_unsigned()
              ? value.get<uint64_t>() >= 1 && value.get<uint64_t>() <= static_cast<uint64_t>(kMost)
              : value.is_number_integer() && value.get<int64_t>() >= 1 &&
                    value.get<int64_t>() <= kMost;
      if (!inRange) {
        throw badRequest("invalid_max_iterations",
                         "max_iterations must be an integer from 1 to " + std::to_string(kMost));
      }
      options.maxIterations = static_cast<int>(value.get<int64_t>());
    }
    if (in.contains("tools") && !in["tools"].is_null()) {
      if (!in["tools"].is_array())
        throw badRequest("invalid_tools", "tools must be an array of names");
      std::vector<std::string> tools;
      for (const auto& t : in["tools"]) {
        if (!t.is_string()) throw badRequest("invalid_tools", "tools must be an array of names");
        tools.push_back(t.get<std::string>());
      }
      options.tools = tools;
    }
    if (in.contains("metadata")) options.metadata = in["metadata"];
    // The worker that claims the run continues this request's trace.
    if (const TraceContext trace = currentTraceContext(); trace.valid()) {
      options.traceparent = trace.traceparent();
      options.tracestate = trace.traceState;
    }
    if (!options.id.empty() && runs->run(options.id)) {
      throw conflict("run_exists", "run '" + options.id + "' exists");
    }
    RunInfo run = runs->submit(threadId, input, options);
    if (run.status == RunStatus::Rejected) {
      json out = errorBody(run.error, "conflict_error", "run_rejected");
      out["run"] = toJson(run);
      sendJson(res, 409, out);
      return;
    }
    json out = toJson(run);
    out["object"] = "run";
    sendJson(res, 202, out);
  }

  void listThreadRuns(const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    mustThread(id);
    RunListOptions list;
    list.threadId = id;
    list.limit = std::min<size_t>(options.maxPage, runs->options().limits.maxPage);
    json data = json::array();
    for (const auto& run : runs->listRuns(list))
      data.push_back(toJson(run));
    sendJson(res, 200, {{"object", "list"}, {"data", data}});
  }

  void getRun(const httplib::Request& req, httplib::Response& res) {
    RunInfo run = mustRun(req.matches[1]);
    json out = toJson(run);
    out["object"] = "run";
    json input = json::array();
    for (const Message& m : run.input)
      input.push_back(toJson(m));
    out["input"] = input;
    sendJson(res, 200, out);
  }

  void cancelRun(const httplib::Request& req, httplib::Response& res) {
    const RunInfo run = mustRun(req.matches[1]);
    json out = toJson(runs->cancel(run.id));
    out["object"] = "run";
    sendJson(res, 200, out);
  }

  void respondRun(const httplib::Request& req, httplib::Response& res) {
    const RunInfo run = mustRun(req.matches[1]);
    json in = body(req);
    if (!in.contains("response")) throw badRequest("invalid_response", "response is required");
    if (run.status != RunStatus::Waiting || !run.response.is_null()) {
      throw conflict("run_not_waiting", "run '" + run.id + "' is " +
                                            std::string(toString(run.status)) +
                                            (run.response.is_null() ? "" : " and answered") +
                                            ", not waiting for an answer");
    }
    json out = toJson(runs->respond(run.id, in["response"]));
    out["object"] = "run";
    sendJson(res, 200, out);
  }

  void events(const httplib::Request& req, httplib::Response& res) {
    const std::string threadId = req.matches[1];
    mustThread(threadId);
    int64_t after = 0;
    const std::string lastId = req.get_header_value("Last-Event-ID");
    const std::string given = !lastId.empty() ? lastId : req.get_param_value("after");
    if (!given.empty()) {
      auto n = parseInt(given);
      if (!n || *n < 0) {
        throw badRequest("invalid_after", "Last-Event-ID and after must be a sequence number");
      }
      after = *n;
    }
    const std::string follow = req.get_param_value("follow");
    if (follow == "false" || follow == "0") {
      // The events there are (one page of the store's maxEventsPerCall), then the end: for
      // scripts and curl. Sent a few at a time as they are read, never built whole.
      struct Page {
        int64_t after;
        size_t left;
      };
      auto page = std::make_shared<Page>(Page{after, runs->options().limits.maxEventsPerCall});
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [this, threadId, page](
                                                                size_t, httplib::DataSink& sink) {
        constexpr size_t kBatch = 8;  // events per write: at most 8 x maxEventBytes held
        std::vector<StoredEvent> events;
        if (page->left > 0) {
          try {
            events = runs->readEvents(threadId, page->after, std::min(kBatch, page->left));
          } catch (const std::exception& e) {
            log("parley serve: reading events of a thread: " + std::string(e.what()));
            return false;  // the connection ends: the client sees a cut stream
          }
        }
        if (events.empty()) {
          sink.done();
          return true;
        }
        std::string out;
        for (const auto& e : events)
          out += service::formatSseEvent(e, options.maxEventBytes);
        page->after = events.back().seq;
        page->left = events.size() < std::min(kBatch, page->left) ? 0 : page->left - events.size();
        return sink.write(out.data(), out.size());
      });
      return;
    }
    if (feeds->streams() >= options.maxStreams) {
      throw ApiError(503, "server_error", "too_many_streams",
                     "the service serves " + std::to_string(options.maxStreams) +
                         " event streams at most (ServiceOptions::maxStreams); try again later");
    }
    auto feed = feeds->subscribe(threadId, after);
    metrics.streamOpened();
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
    struct Stream {
      int64_t after;
      bool greeted = false;
    };
    auto stream = std::make_shared<Stream>(Stream{after});
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, feed, stream](size_t, httplib::DataSink& sink) {
          if (!stream->greeted) {
            stream->greeted = true;
            // How long EventSource waits before it reconnects (with Last-Event-ID).
            const std::string hello = "retry: 1000\n\n";
            return sink.write(hello.data(), hello.size());
          }
          const auto deadline = std::chrono::steady_clock::now() + options.heartbeat;
          auto batch = feeds->next(feed, stream->after, deadline);
          if (batch.ended) {
            sink.done();
            return true;
          }
          if (batch.texts.empty()) {
            const std::string beat = ": heartbeat\n\n";
            return sink.write(beat.data(), beat.size());
          }
          std::string out;
          for (const auto& text : batch.texts)
            out += *text;
          stream->after = batch.last;
          metrics.eventsSent(batch.texts.size());
          return sink.write(out.data(), out.size());
        },
        [this, feed](bool) {
          feeds->unsubscribe(feed);
          metrics.streamClosed();
        });
  }

  void health(httplib::Response& res) {
    try {
      runs->threads().threadInfo("healthz");
      checkIntegrity();
      sendJson(res, 200, {{"status", "ok"}});
    } catch (const std::exception& e) {
      log(std::string("parley serve: health check: ") + e.what());
      sendJson(res, 503, {{"status", "unavailable"}});
    }
  }

  // The whole database, at most every integrityCheckEvery (a check reads every page); throws
  // while the last check failed. Concurrent probes wait for the one check running.
  void checkIntegrity() {
    std::lock_guard lock(healthMutex);
    const auto now = std::chrono::steady_clock::now();
    if (!checked || now - checkedAt >= options.integrityCheckEvery) {
      try {
        runs->checkIntegrity();
        damage.clear();
      } catch (const std::exception& e) {
        damage = e.what();
      }
      checked = true;
      checkedAt = now;
    }
    if (!damage.empty()) throw StoreError(damage);
  }

  // --- plumbing -------------------------------------------------------------------------------

  // Runs a route: errors become OpenAI-style error objects. A store's own message may name the
  // database (a connection string): a server error says only where to look.
  template <typename F>
  httplib::Server::Handler route(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      // The request continues its caller's trace (docs/telemetry.md); a run it submits keeps it.
      const auto caller = TraceContext::parse(req.get_header_value("traceparent"),
                                              req.get_header_value("tracestate"));
      ContextScope remote(caller.value_or(TraceContext{}));
      Span span(req.method, "", SpanKind::Server);
      RequestSpanEnd described{span, req, res};
      try {
        f(req, res);
      } catch (const ApiError& e) {
        sendError(res, e);
      } catch (const ValidationError& e) {
        sendError(res, badRequest("invalid_request", e.what()));
      } catch (const StoreConflict& e) {
        sendError(res, conflict("conflict", e.what()));
      } catch (const std::exception& e) {
        log("parley serve: " + req.method + " " + req.path + ": " + e.what());
        sendError(res, ApiError(500, "server_error", "internal_error",
                                "the request failed on the server; its log says why"));
      }
    };
  }

  void cors(httplib::Response& res) const {
    if (options.corsOrigin.empty()) return;
    res.set_header("Access-Control-Allow-Origin", options.corsOrigin);
    res.set_header("Vary", "Origin");
  }

  // The checks before any route (Admission); Handled when refused.
  httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res) {
    metrics.requestStarted();
    cors(res);
    auto refusal = admission.check(req);
    if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
    for (const auto& [name, value] : refusal->headers)
      res.set_header(name, value);
    sendError(res, ApiError(refusal->status, refusal->type, refusal->code, refusal->message));
    return httplib::Server::HandlerResponse::Handled;
  }

  void install() {
    http::ServerLimits limits;
    limits.workers = options.threads > 0 ? static_cast<size_t>(options.threads) : 16;
    // The service's own cap (too_many_streams) answers first; the front's is the backstop, with
    // room for the requests that are refused on such a thread.
    limits.maxLongLived = options.maxStreams + 64;
    limits.maxBodyBytes = options.maxBodyBytes;
    limits.maxConnections = options.maxConnections;
    limits.headTimeout = options.headTimeout;
    limits.maxHeadBytes = options.maxHeadBytes;
    limits.maxHeaders = options.maxHeaders;
    limits.idleTimeout = options.keepAlive;
    // A followed event stream holds its connection for long: a thread of its own.
    limits.longLived = [](std::string_view method, std::string_view target) {
      const std::string_view path = target.substr(0, target.find('?'));
      const std::string_view query =
          target.find('?') == std::string_view::npos ? "" : target.substr(target.find('?'));
      return method == "GET" && path.ends_with("/events") &&
             query.find("follow=false") == std::string_view::npos &&
             query.find("follow=0") == std::string_view::npos;
    };
    server = std::make_unique<http::Server>(limits);
    auto& server = *this->server;
    server.set_keep_alive_max_count(1000);
    server.set_keep_alive_timeout(std::max<time_t>(
        1, std::chrono::duration_cast<std::chrono::seconds>(options.keepAlive).count()));
    server.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return admit(req, res); });
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (!req.path.ends_with("/events")) metrics.requestDone(res.status);
    });
    // Responses httplib makes itself (413 past the body cap, 404 without a route) get an error
    // object too.
    server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      cors(res);
      if (res.status == 413) {
        sendError(res, ApiError(413, "invalid_request_error", "body_too_large",
                                "the request body is over " + std::to_string(options.maxBodyBytes) +
                                    " bytes (ServiceOptions::maxBodyBytes)"));
      } else if (res.status == 404) {
        sendError(res, notFound("no route for " + req.method + " " + req.path));
      } else {
        sendError(
            res, ApiError(res.status, "invalid_request_error", "http_" + std::to_string(res.status),
                          "HTTP " + std::to_string(res.status)));
      }
    });
    server.Options(".*", [this](const httplib::Request&, httplib::Response& res) {
      if (options.corsOrigin.empty()) {
        res.status = 404;
        return;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID");
      res.set_header("Access-Control-Max-Age", "600");
    });

    const std::string id = R"(([^/]+))";
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(service::chatPage()), "text/html; charset=utf-8");
    });
    server.Get("/healthz",
               [this](const httplib::Request&, httplib::Response& res) { health(res); });
    server.Get("/metrics", route([this](const httplib::Request&, httplib::Response& res) {
                 res.set_content(metrics.render(runs->countRuns(), feeds->streams()) +
                                     "# HELP parley_event_log_polls_total Polls of the followed "
                                     "threads' event logs (one query for all).\n"
                                     "# TYPE parley_event_log_polls_total counter\n"
                                     "parley_event_log_polls_total " +
                                     std::to_string(feeds->polls()) +
                                     "\n# HELP parley_event_log_reads_total Reads of a followed "
                                     "thread's events after a poll saw it move.\n"
                                     "# TYPE parley_event_log_reads_total counter\n"
                                     "parley_event_log_reads_total " +
                                     std::to_string(feeds->reads()) + "\n" + telemetryMetrics(),
                                 "text/plain; version=0.0.4");
               }));
    server.Post("/v1/threads", route([this](auto& q, auto& r) { createThread(q, r); }));
    server.Get("/v1/threads", route([this](auto& q, auto& r) { listThreads(q, r); }));
    server.Get("/v1/threads/" + id, route([this](auto& q, auto& r) { getThread(q, r); }));
    server.Delete("/v1/threads/" + id, route([this](auto& q, auto& r) { deleteThread(q, r); }));
    server.Post("/v1/threads/" + id + "/fork",
                route([this](auto& q, auto& r) { forkThread(q, r); }));
    server.Post("/v1/threads/" + id + "/operations",
                route([this](auto& q, auto& r) { operations(q, r); }));
    server.Post("/v1/threads/" + id + "/runs", route([this](auto& q, auto& r) { submit(q, r); }));
    server.Get("/v1/threads/" + id + "/runs",
               route([this](auto& q, auto& r) { listThreadRuns(q, r); }));
    server.Get("/v1/threads/" + id + "/events", route([this](auto& q, auto& r) { events(q, r); }));
    server.Get("/v1/runs/" + id, route([this](auto& q, auto& r) { getRun(q, r); }));
    server.Post("/v1/runs/" + id + "/cancel", route([this](auto& q, auto& r) { cancelRun(q, r); }));
    server.Post("/v1/runs/" + id + "/respond",
                route([this](auto& q, auto& r) { respondRun(q, r); }));
  }
};

Service::Service(std::shared_ptr<RunStore> runs, ServiceOptions options) {
  if (!runs) throw ValidationError("runs", "a Service needs a RunStore");
  if (options.authTokens.empty() && !service::isLoopback(options.host)) {
    throw ValidationError("host", "'" + options.host +
                                      "' is not a loopback address: without an auth token the "
                                      "service only listens on loopback (127.0.0.1, ::1)");
  }
  for (const auto& token : options.authTokens) {
    if (token.size() < 16) throw ValidationError("authTokens", "a token must be 16 bytes at least");
  }
  if (options.port < 0 || options.port > 65535) throw ValidationError("port", "must be 0 to 65535");
  if (options.threads < 0) throw ValidationError("threads", "must be 0 (16) or positive");
  if (options.maxConnections == 0) throw ValidationError("maxConnections", "must be positive");
  if (options.maxHeadBytes < 256) throw ValidationError("maxHeadBytes", "must be 256 at least");
  if (options.maxHeaders == 0) throw ValidationError("maxHeaders", "must be positive");
  if (options.headTimeout.count() <= 0) throw ValidationError("headTimeout", "must be positive");
  if (options.keepAlive.count() <= 0) throw ValidationError("keepAlive", "must be positive");
  if (options.authFailuresPerSecond < 0) {
    throw ValidationError("authFailuresPerSecond", "must not be negative");
  }
  if (options.maxRateLimitedClients == 0) {
    throw ValidationError("maxRateLimitedClients", "must be positive");
  }
  for (const auto& name : options.allowedHosts) {
    const bool ok =
        !name.empty() && name.size() <= 255 && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
                 c == '[' || c == ']' || c == '*' || c == '_';
        });
    if (!ok) {
      throw ValidationError("allowedHosts",
                            "'" + name + "' is not a host name (name or name:port)");
    }
  }
  if (options.maxBodyBytes == 0) throw ValidationError("maxBodyBytes", "must be positive");
  if (options.maxEventBytes < 256) throw ValidationError("maxEventBytes", "must be 256 at least");
  if (options.maxPage == 0) throw ValidationError("maxPage", "must be positive");
  if (options.maxIdBytes == 0) throw ValidationError("maxIdBytes", "must be positive");
  if (options.heartbeat.count() <= 0) throw ValidationError("heartbeat", "must be positive");
  if (options.ratePerSecond < 0) throw ValidationError("ratePerSecond", "must not be negative");
  impl_ = std::make_unique<Impl>(std::move(runs), std::move(options));
  impl_->install();
}

Service::~Service() {
  stop();
}

void Service::start() {
  Impl& s = *impl_;
  if (s.started) throw ValidationError("start", "called twice");
  s.port = s.server->start(s.options.host, s.options.port, "parley serve");
  // The Host names are known once the port is; a request before that (someone who guessed the
  // port) is refused.
  s.admission.bind(s.port);
  s.started = true;
}

void Service::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  std::lock_guard lock(s.stopMutex);
  if (s.stopping.exchange(true)) return;
  s.feeds->stop();  // every stream ends
  s.server->shutdown();
}

int Service::port() const {
  return impl_->port;
}

std::string Service::baseUrl() const {
  const std::string& host = impl_->options.host;
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "http://" + shown + ":" + std::to_string(impl_->port);
}

}  // namespace parley
