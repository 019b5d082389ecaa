// The Agent Protocol / LangGraph API of `parley serve` (docs/service.md, "Agent Protocol and the
// LangGraph API"): the routes' registration and the readers and forms the route files share.
// Assistants are in agent_protocol_assistants.cpp, threads in agent_protocol_threads.cpp, runs in
// agent_protocol_runs.cpp, the stream encoding in agent_protocol_stream.cpp.
#include "service/agent_protocol.hpp"

#include <charconv>

#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/iso_time.hpp"
#include "parley/json.hpp"
#include "parley/stored_thread.hpp"
#include "parley/version.hpp"
#include "service/agent_protocol_impl.hpp"
#include "service/api.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

size_t depthOf(const json& value) {
  if (!value.is_structured()) return 0;
  size_t deepest = 0;
  for (const auto& item : value)
    deepest = std::max(deepest, depthOf(item));
  return deepest + 1;
}

}  // namespace

std::string langGraphRunStatus(RunStatus status) {
  switch (status) {
    case RunStatus::Queued:
      return "pending";
    case RunStatus::Running:
      return "running";
    case RunStatus::Waiting:
      return "interrupted";
    case RunStatus::Completed:
      return "success";
    case RunStatus::Cancelled:
      return "interrupted";
    case RunStatus::Failed:
    case RunStatus::Rejected:
      return "error";
  }
  return "error";
}

void sendApJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// --- readers ----------------------------------------------------------------------------------

// The native routes' readers (api.hpp): their ApiError is answered like an ApError.
json AgentProtocol::Impl::body(const httplib::Request& req) const {
  return jsonBody(req);
}

void AgentProtocol::Impl::checkId(const std::string& id, const char* what) const {
  service::checkId(id, what, options.maxIdBytes);
}

void AgentProtocol::Impl::checkMetadata(const json& value, const std::string& field) const {
  if (value.is_null()) return;
  if (!value.is_object()) throw apBadRequest("invalid_metadata", field + " must be an object");
  if (depthOf(value) > kMaxMetadataDepth) {
    throw apBadRequest("invalid_metadata", field + " is nested deeper than " +
                                               std::to_string(kMaxMetadataDepth) + " levels");
  }
  if (value.dump().size() > kMaxMetadataBytes) {
    throw apBadRequest("invalid_metadata",
                       field + " is over " + std::to_string(kMaxMetadataBytes) + " bytes");
  }
}

size_t AgentProtocol::Impl::pageLimit(const json& value, size_t byDefault) const {
  if (value.is_null()) return byDefault;
  if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
      static_cast<size_t>(value.get<int64_t>()) > options.maxPage) {
    throw apBadRequest("invalid_limit", "limit must be 1 to " + std::to_string(options.maxPage));
  }
  return static_cast<size_t>(value.get<int64_t>());
}

size_t AgentProtocol::Impl::pageOffset(const json& value) const {
  if (value.is_null()) return 0;
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      static_cast<size_t>(value.get<int64_t>()) > kMaxSearchScan) {
    throw apBadRequest("invalid_offset", "offset must be 0 to " + std::to_string(kMaxSearchScan));
  }
  return static_cast<size_t>(value.get<int64_t>());
}

ThreadInfo AgentProtocol::Impl::mustThread(const std::string& id) const {
  checkId(id, "thread");
  auto info = runs.threads().threadInfo(id);
  if (!info) throw apNotFound("no thread '" + id + "'");
  return *info;
}

RunInfo AgentProtocol::Impl::mustRun(const std::string& threadId, const std::string& runId) const {
  checkId(runId, "run");
  auto run = runs.run(runId);
  if (!run || (!threadId.empty() && run->threadId != threadId)) {
    throw apNotFound("no run '" + runId + "'" +
                     (threadId.empty() ? "" : " on thread '" + threadId + "'"));
  }
  return *run;
}

// --- forms ------------------------------------------------------------------------------------

AgentProtocol::Impl::ThreadStatus AgentProtocol::Impl::threadStatus(
    const std::string& threadId) const {
  ThreadStatus out;
  for (RunStatus status : {RunStatus::Waiting, RunStatus::Running, RunStatus::Queued}) {
    RunListOptions list;
    list.threadId = threadId;
    list.status = status;
    list.limit = 1;
    auto found = runs.listRuns(list);
    if (found.empty()) continue;
    if (status == RunStatus::Waiting && found.front().response.is_null()) {
      out.status = "interrupted";
      out.waiting = found.front();
    } else if (out.status == "idle") {  // an answered wait goes on: busy
      out.status = "busy";
    }
  }
  return out;
}

std::optional<std::pair<size_t, size_t>> parseCheckpoint(const std::string& id) {
  if (id.size() < 4 || id[0] != 'b') return std::nullopt;
  const size_t dash = id.find("-n");
  if (dash == std::string::npos) return std::nullopt;
  size_t batch = 0;
  size_t size = 0;
  auto a = std::from_chars(id.data() + 1, id.data() + dash, batch);
  auto b = std::from_chars(id.data() + dash + 2, id.data() + id.size(), size);
  if (a.ec != std::errc() || a.ptr != id.data() + dash || b.ec != std::errc() ||
      b.ptr != id.data() + id.size()) {
    return std::nullopt;
  }
  return std::make_pair(batch, size);
}

AgentProtocol::Impl::View AgentProtocol::Impl::view(
    const std::string& threadId, std::optional<std::pair<size_t, size_t>> at) const {
  ConversationManager manager;
  loadConversation(runs.threads(), threadId, manager);
  View out;
  out.storageSize = manager.storageSize();
  size_t limit = out.storageSize;
  if (at) {
    const auto marks = manager.getMarkMap();
    if (at->first > marks.currentBatch || at->second > out.storageSize) {
      throw apNotFound("no checkpoint of batch " + std::to_string(at->first) + " at " +
                       std::to_string(at->second) + " messages in thread '" + threadId + "'");
    }
    if (at->first < marks.currentBatch) manager.rollbackToBatch(at->first);
    limit = at->second;
  }
  const auto marks = manager.getMarkMap();
  out.batch = at ? at->first : marks.currentBatch;
  const auto visible = manager.getMessages();
  for (size_t i = 0; i < visible.size(); ++i) {
    const size_t index = marks.originalIndices.at(i);
    if (index < limit) out.messages.emplace(static_cast<int64_t>(index), visible[i]);
  }
  if (at) out.storageSize = limit;
  return out;
}

json AgentProtocol::Impl::values(const std::string& threadId, const View& view) const {
  json messages = json::array();
  for (const auto& [index, message] : view.messages)
    messages.push_back(toLangGraphMessage(message, langGraphMessageId(threadId, index)));
  return {{"messages", std::move(messages)}};
}

json AgentProtocol::Impl::threadJson(const ThreadInfo& info, bool withValues) const {
  const ThreadStatus status = threadStatus(info.id);
  json interrupts = json::object();
  if (status.waiting) {
    interrupts[status.waiting->id] = json::array({langGraphInterrupt(status.waiting->wait)});
  }
  json out = {{"thread_id", info.id},
              {"created_at", isoTime(info.createdAt)},
              {"updated_at", isoTime(info.updatedAt)},
              {"state_updated_at", isoTime(info.updatedAt)},
              {"metadata", info.metadata.is_object() ? info.metadata : json::object()},
              {"status", status.status},
              {"interrupts", interrupts},
              {"config", json::object()}};
  out["values"] = withValues ? values(info.id, view(info.id)) : json(nullptr);
  return out;
}

json AgentProtocol::Impl::runJson(const RunInfo& run) const {
  json metadata = run.options.metadata.is_object() ? run.options.metadata : json::object();
  const std::string assistant = metadata.value("assistant_id", kDefaultAssistant);
  json out = {{"run_id", run.id},
              {"thread_id", run.threadId},
              {"assistant_id", assistant},
              {"created_at", isoTime(run.createdAt)},
              {"updated_at", isoTime(run.updatedAt)},
              {"status", langGraphRunStatus(run.status)},
              {"metadata", metadata},
              {"multitask_strategy", std::string(toString(run.options.policy))},
              {"kwargs", json::object()}};
  if (!run.error.empty()) out["error"] = run.error;
  return out;
}

json AgentProtocol::Impl::stateJson(const ThreadInfo& info, const View& view, bool current,
                                    std::optional<std::pair<size_t, size_t>> parent) const {
  auto checkpoint = [&](size_t batch, size_t size) {
    return json{{"thread_id", info.id},
                {"checkpoint_ns", ""},
                {"checkpoint_id", "b" + std::to_string(batch) + "-n" + std::to_string(size)},
                {"checkpoint_map", nullptr}};
  };
  json out = {{"values", values(info.id, view)},
              {"next", json::array()},
              {"tasks", json::array()},
              {"interrupts", json::array()},
              {"checkpoint", checkpoint(view.batch, view.storageSize)},
              {"metadata", {{"source", "loop"}, {"step", view.storageSize}}},
              {"created_at", isoTime(info.updatedAt)},
              {"parent_checkpoint", nullptr}};
  if (parent) out["parent_checkpoint"] = checkpoint(parent->first, parent->second);
  if (current) {
    const ThreadStatus status = threadStatus(info.id);
    if (status.waiting) {
      const json interrupt = langGraphInterrupt(status.waiting->wait);
      out["next"] = json::array({"tools"});
      out["interrupts"] = json::array({interrupt});
      out["tasks"] = json::array({{{"id", status.waiting->id},
                                   {"name", "tools"},
                                   {"error", nullptr},
                                   {"interrupts", json::array({interrupt})},
                                   {"checkpoint", nullptr},
                                   {"state", nullptr}}});
    } else if (status.status == "busy") {
      out["next"] = json::array({"agent"});
    }
  }
  return out;
}

// --- registration -----------------------------------------------------------------------------

AgentProtocol::AgentProtocol(ServiceState& state) : impl_(std::make_unique<Impl>(state)) {}

AgentProtocol::~AgentProtocol() {
  stop();
}

void AgentProtocol::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.reaperMutex);
    s.stopping = true;
  }
  s.reaperWake.notify_all();
  if (s.reaper.joinable()) s.reaper.join();
}

bool AgentProtocol::longLived(std::string_view method, std::string_view path) {
  const bool runsPath = path.starts_with("/threads/") || path.starts_with("/runs/");
  if (!runsPath) return false;
  if (method == "POST") return path.ends_with("/runs/stream") || path.ends_with("/runs/wait");
  if (method == "GET") return path.ends_with("/stream") || path.ends_with("/join");
  return false;
}

void AgentProtocol::install(httplib::Server& server) {
  Impl* s = impl_.get();
  // Errors: parley's error object, with LangGraph's `detail` beside it.
  auto route = [s](auto f) {
    return [s, f](const httplib::Request& req, httplib::Response& res) {
      auto fail = [&](int status, const std::string& code, const std::string& message) {
        sendApJson(res, status,
                   {{"detail", message},
                    {"error",
                     {{"message", message},
                      {"type", status == 404   ? "not_found_error"
                               : status == 409 ? "conflict_error"
                               : status >= 500 ? "server_error"
                                               : "invalid_request_error"},
                      {"code", code}}}});
      };
      try {
        f(req, res);
      } catch (const ApError& e) {
        fail(e.status, e.code, e.what());
      } catch (const ApiError& e) {
        fail(e.status, e.code, e.what());
      } catch (const ValidationError& e) {
        fail(400, "invalid_request", e.what());
      } catch (const StoreConflict& e) {
        fail(409, "conflict", e.what());
      } catch (const std::exception& e) {
        s->log("parley serve: " + req.method + " " + req.path + ": " + e.what());
        fail(500, "internal_error", "the request failed on the server; its log says why");
      }
    };
  };
  const std::string id = R"(([^/]+))";
  using Q = const httplib::Request&;
  using R = httplib::Response&;
  // Threads.
  // What LangGraph's UIs ask first (Agent Chat UI: is a server there?).
  server.Get("/info", route([](Q, R r) {
               sendApJson(
                   r, 200,
                   {{"version", kVersion},
                    {"context", "parley"},
                    {"flags", {{"assistants", true}, {"crons", false}, {"langsmith", false}}}});
             }));
  server.Post("/threads", route([s](Q q, R r) { s->createThread(q, r); }));
  server.Post("/threads/search", route([s](Q q, R r) { s->searchThreads(q, r, false); }));
  server.Post("/threads/count", route([s](Q q, R r) { s->searchThreads(q, r, true); }));
  server.Get("/threads/" + id, route([s](Q q, R r) { s->getThread(q, r); }));
  server.Patch("/threads/" + id, route([s](Q q, R r) { s->patchThread(q, r); }));
  server.Delete("/threads/" + id, route([s](Q q, R r) { s->deleteThread(q, r); }));
  server.Post("/threads/" + id + "/copy", route([s](Q q, R r) { s->copyThread(q, r); }));
  server.Get("/threads/" + id + "/state", route([s](Q q, R r) { s->threadState(q, r, ""); }));
  server.Get("/threads/" + id + "/state/" + id,
             route([s](Q q, R r) { s->threadState(q, r, q.matches[2]); }));
  server.Post(
      "/threads/" + id + "/state/checkpoint", route([s](Q q, R r) {
        const json in = s->body(q);
        const json cp = in.value("checkpoint", json::object());
        if (!cp.is_object() || !cp.contains("checkpoint_id") || !cp["checkpoint_id"].is_string()) {
          throw apBadRequest("invalid_checkpoint", "checkpoint.checkpoint_id is required");
        }
        s->threadState(q, r, cp["checkpoint_id"].get<std::string>());
      }));
  for (const char* method : {"POST", "PATCH"}) {
    auto refuse = route([](Q, R) {
      throw apBadRequest("unsupported",
                         "a parley thread's state changes by runs and context operations only "
                         "(POST /v1/threads/{id}/operations); it has no graph state to update");
    });
    if (std::string(method) == "POST") {
      server.Post("/threads/" + id + "/state", refuse);
    } else {
      server.Patch("/threads/" + id + "/state", refuse);
    }
  }
  server.Get("/threads/" + id + "/stream", route([s](Q q, R r) { s->threadStream(q, r); }));
  server.Post("/threads/" + id + "/history", route([s](Q q, R r) { s->threadHistory(q, r); }));
  server.Get("/threads/" + id + "/history", route([s](Q q, R r) { s->threadHistory(q, r); }));
  // Runs on a thread.
  server.Post("/threads/" + id + "/runs",
              route([s](Q q, R r) { s->createRun(q, r, false, Impl::Answer::Run); }));
  server.Post("/threads/" + id + "/runs/wait",
              route([s](Q q, R r) { s->createRun(q, r, false, Impl::Answer::Wait); }));
  server.Post("/threads/" + id + "/runs/stream",
              route([s](Q q, R r) { s->createRun(q, r, false, Impl::Answer::Stream); }));
  server.Get("/threads/" + id + "/runs", route([s](Q q, R r) { s->listRuns(q, r); }));
  server.Get("/threads/" + id + "/runs/" + id, route([s](Q q, R r) { s->getRun(q, r); }));
  server.Delete("/threads/" + id + "/runs/" + id, route([s](Q q, R r) { s->deleteRun(q, r); }));
  server.Post("/threads/" + id + "/runs/" + id + "/cancel",
              route([s](Q q, R r) { s->cancelRun(q, r); }));
  server.Get("/threads/" + id + "/runs/" + id + "/join",
             route([s](Q q, R r) { s->joinRun(q, r); }));
  server.Get("/threads/" + id + "/runs/" + id + "/stream",
             route([s](Q q, R r) { s->joinStream(q, r, false); }));
  // Stateless runs: a thread of their own, deleted once they finish (on_completion "delete").
  server.Post("/runs", route([s](Q q, R r) { s->createRun(q, r, true, Impl::Answer::Run); }));
  server.Post("/runs/wait", route([s](Q q, R r) { s->createRun(q, r, true, Impl::Answer::Wait); }));
  server.Post("/runs/stream",
              route([s](Q q, R r) { s->createRun(q, r, true, Impl::Answer::Stream); }));
  server.Get("/runs/" + id + "/stream", route([s](Q q, R r) { s->joinStream(q, r, true); }));
  // Assistants: the workers' profiles (read-only) and the created ones, versioned.
  server.Post("/assistants", route([s](Q q, R r) { s->createAssistant(q, r); }));
  server.Post("/assistants/search", route([s](Q q, R r) { s->searchAssistants(q, r, false); }));
  server.Post("/assistants/count", route([s](Q q, R r) { s->searchAssistants(q, r, true); }));
  server.Get("/assistants/" + id, route([s](Q q, R r) { s->getAssistant(q, r); }));
  server.Patch("/assistants/" + id, route([s](Q q, R r) { s->updateAssistant(q, r); }));
  server.Delete("/assistants/" + id, route([s](Q q, R r) { s->deleteAssistant(q, r); }));
  server.Post("/assistants/" + id + "/versions",
              route([s](Q q, R r) { s->assistantVersions(q, r); }));
  server.Post("/assistants/" + id + "/latest",
              route([s](Q q, R r) { s->setLatestAssistant(q, r); }));

  // The store: namespaced items.
  server.Put("/store/items", route([s](Q q, R r) { s->storePut(q, r); }));
  server.Get("/store/items", route([s](Q q, R r) { s->storeGet(q, r); }));
  server.Delete("/store/items", route([s](Q q, R r) { s->storeDelete(q, r); }));
  server.Post("/store/items/search", route([s](Q q, R r) { s->storeSearch(q, r); }));
  server.Post("/store/namespaces", route([s](Q q, R r) { s->storeNamespaces(q, r); }));

  s->reaper = std::thread([s] { s->reap(); });
}

}  // namespace parley::service
