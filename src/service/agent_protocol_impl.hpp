// What the route files of the Agent Protocol (agent_protocol_*.cpp) share: the error they throw,
// the readers of a request, the JSON forms of a thread, a run and a state. Internal to
// src/service/.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "parley/run_store.hpp"
#include "service/agent_protocol.hpp"
#include "service/agent_protocol_stream.hpp"
#include "service/assistants.hpp"
#include "service/event_feeds.hpp"
#include "service/metrics.hpp"
#include "service/service.hpp"
#include "service/service_state.hpp"
#include "store/item_store.hpp"

namespace parley::service {

// Caps of the LangGraph routes, beside ServiceOptions' (docs/service.md, "Security and caps").
inline constexpr size_t kMaxMetadataBytes = 64 << 10;   // a metadata object, as JSON
inline constexpr size_t kMaxMetadataDepth = 16;         // its nesting
inline constexpr size_t kMaxSearchScan = 10'000;        // threads one search reads at most
inline constexpr size_t kMaxStatelessPending = 10'000;  // runs awaiting their clean-up or webhook
inline constexpr size_t kMaxHistory = 1'000;            // states of one history page
inline constexpr size_t kMaxHistoryMessages = 50'000;   // messages of one page's states, summed

// Thrown by a route; answered as {"detail": message, "error": {"message", "type", "code"}}
// (LangGraph's clients read `detail`, parley's `error`).
struct ApError : std::runtime_error {
  ApError(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), code(std::move(code)) {}
  int status;
  std::string code;
};
inline ApError apBadRequest(const std::string& code, const std::string& what) {
  return ApError(400, code, what);
}
inline ApError apNotFound(const std::string& what) {
  return ApError(404, "not_found", what);
}
inline ApError apConflict(const std::string& code, const std::string& what) {
  return ApError(409, code, what);
}

// in[key] as a string; `byDefault` when absent or null; ApError 400 naming it otherwise.
inline std::string optionalString(const nlohmann::json& in, const char* key,
                                  const std::string& byDefault) {
  auto it = in.find(key);
  if (it == in.end() || it->is_null()) return byDefault;
  if (!it->is_string())
    throw apBadRequest("invalid_" + std::string(key), std::string(key) + " is a string");
  return it->get<std::string>();
}

// Whether `have` holds every key of `wanted` with an equal value (a search's metadata filter;
// not an object: everything matches).
inline bool metadataMatches(const nlohmann::json& have, const nlohmann::json& wanted) {
  if (!wanted.is_object()) return true;
  for (const auto& [key, value] : wanted.items()) {
    if (!have.is_object() || !have.contains(key) || have[key] != value) return false;
  }
  return true;
}

// LangGraph's names of parley's run states.
std::string langGraphRunStatus(RunStatus status);

struct AgentProtocol::Impl {
  ServiceState& state;
  RunStore& runs;
  const ServiceOptions& options;

  // Runs with something to do once they finish: a stateless run's thread goes
  // (on_completion "delete"), a webhook is posted.
  struct WatchedRun {
    std::string threadId;
    std::string runId;
    bool reap = false;    // delete the thread
    std::string webhook;  // post the run to this URL ("": none)
  };
  std::mutex reaperMutex;
  std::condition_variable reaperWake;
  std::deque<WatchedRun> watchedRuns;
  bool stopping = false;
  std::thread reaper;

  // The store's items, made on first use (its table too).
  std::once_flag itemsMade;
  std::unique_ptr<detail::ItemStore> itemStore;

  explicit Impl(ServiceState& s) : state(s), runs(*state.runs), options(state.options) {}

  void log(const std::string& line) const { state.log(line); }

  // --- readers --------------------------------------------------------------------------------
  nlohmann::json body(const httplib::Request& req) const;
  void checkId(const std::string& id, const char* what) const;
  // A metadata object (or null) within the caps; ApError 400 naming `field`.
  void checkMetadata(const nlohmann::json& value, const std::string& field) const;
  size_t pageLimit(const nlohmann::json& value, size_t byDefault) const;
  size_t pageOffset(const nlohmann::json& value) const;
  ThreadInfo mustThread(const std::string& id) const;
  RunInfo mustRun(const std::string& threadId, const std::string& runId) const;

  // --- forms ----------------------------------------------------------------------------------
  // The thread's status: busy (a run queued or running), interrupted (one waiting), else idle;
  // and the interrupts of the waiting run.
  struct ThreadStatus {
    std::string status = "idle";
    std::optional<RunInfo> waiting;
  };
  ThreadStatus threadStatus(const std::string& threadId) const;
  // The visible messages by storage index, the current batch and storage size.
  struct View {
    std::map<int64_t, Message> messages;
    size_t batch = 0;
    size_t storageSize = 0;
  };
  View view(const std::string& threadId, std::optional<std::pair<size_t, size_t>> at = {}) const;
  nlohmann::json values(const std::string& threadId, const View& view) const;
  nlohmann::json threadJson(const ThreadInfo& info, bool withValues = true) const;
  nlohmann::json runJson(const RunInfo& run) const;
  // A state of the thread; `parent` the state before it (threadHistory lists them).
  nlohmann::json stateJson(const ThreadInfo& info, const View& view, bool current,
                           std::optional<std::pair<size_t, size_t>> parent) const;

  // --- routes (agent_protocol_threads.cpp) ----------------------------------------------------
  void createThread(const httplib::Request& req, httplib::Response& res);
  void getThread(const httplib::Request& req, httplib::Response& res);
  void patchThread(const httplib::Request& req, httplib::Response& res);
  void deleteThread(const httplib::Request& req, httplib::Response& res);
  void copyThread(const httplib::Request& req, httplib::Response& res);
  void searchThreads(const httplib::Request& req, httplib::Response& res, bool count);
  void threadState(const httplib::Request& req, httplib::Response& res,
                   const std::string& checkpointId);
  void threadHistory(const httplib::Request& req, httplib::Response& res);

  // --- routes (agent_protocol_runs.cpp) -------------------------------------------------------
  enum class Answer { Run, Wait, Stream };
  // The state a run is to start from (`checkpoint.checkpoint_id` or `checkpoint_id`); nullopt
  // when neither is given. ApError 400 for an id that is not parley's.
  std::optional<std::pair<size_t, size_t>> runCheckpoint(const nlohmann::json& in) const;
  // Makes the thread's view the checkpoint's state before a run on it: nothing for the latest
  // state; an earlier state becomes a new batch (the later messages stay in the history). A
  // resumed interrupt goes on only at the latest state. With `takeLastUser` (a run without
  // input) the state's last message, the user's, is left out of the view and returned: the
  // run's input, answered again. ApError 404 / 409 / 400 otherwise.
  std::vector<Message> startFromCheckpoint(const std::string& threadId,
                                           std::pair<size_t, size_t> at, bool resume,
                                           bool takeLastUser);
  // The graph an assistant runs: a created assistant's `graph_id`, else the profile it names.
  std::string graphOf(const std::string& assistantId) const;
  // Keeps the assistant of the thread's latest run in its metadata (`graph_id`, `assistant_id`),
  // as LangGraph does, so that a UI finds a graph's threads by searching its metadata.
  void noteAssistant(const std::string& threadId, const std::string& assistantId);
  void createRun(const httplib::Request& req, httplib::Response& res, bool stateless,
                 Answer answer);
  void listRuns(const httplib::Request& req, httplib::Response& res);
  void getRun(const httplib::Request& req, httplib::Response& res);
  void deleteRun(const httplib::Request& req, httplib::Response& res);
  void cancelRun(const httplib::Request& req, httplib::Response& res);
  void joinRun(const httplib::Request& req, httplib::Response& res);
  void joinStream(const httplib::Request& req, httplib::Response& res, bool stateless);
  // GET /threads/{id}/stream: the stream of the thread's current run (running, waiting or the
  // next queued), as joinStream; only `end` when the thread has none.
  void threadStream(const httplib::Request& req, httplib::Response& res);
  // The stream modes and Last-Event-ID of a join.
  StreamModes joinModes(const httplib::Request& req) const;
  std::optional<StreamPosition> joinPosition(const httplib::Request& req) const;
  // Streams one run's events, reading the thread's log from `after` (a sequence number before
  // the run's first event), sending what comes after `resume` (and `metadata` first if asked).
  void streamRun(httplib::Response& res, const std::string& threadId, const std::string& runId,
                 StreamModes modes, int64_t after, std::optional<StreamPosition> resume,
                 bool metadata, bool cancelOnDisconnect,
                 std::function<void(bool ended)> onClose = {});
  // Once the run finished, its webhook is posted and its thread deleted if asked: now, or by the
  // clean-up thread.
  void settleWhenFinished(const WatchedRun& watched);
  // Does so if the run finished (or is gone); false while it goes on.
  bool settleRun(const WatchedRun& watched);
  // Queues the run's webhook: the run as runs.get answers it, with the thread's values.
  void sendRunWebhook(const RunInfo& run, const std::string& url);
  // Whether the run's wait at `seq` was answered (a run_responded of it after seq in the log).
  bool answeredAfter(const std::string& threadId, const std::string& runId, int64_t seq);
  // Waits until the run finished or waits; the run as it is then.
  RunInfo awaitRun(const std::string& threadId, const std::string& runId);
  // What runs.wait and join answer: the thread's values, with __interrupt__ or __error__.
  nlohmann::json finalValues(const RunInfo& run);
  void reap();

  // --- routes (agent_protocol_store.cpp) ------------------------------------------------------
  detail::ItemStore& items();
  void storePut(const httplib::Request& req, httplib::Response& res);
  void storeGet(const httplib::Request& req, httplib::Response& res);
  void storeDelete(const httplib::Request& req, httplib::Response& res);
  void storeSearch(const httplib::Request& req, httplib::Response& res);
  void storeNamespaces(const httplib::Request& req, httplib::Response& res);

  // --- routes (agent_protocol_assistants.cpp) -------------------------------------------------
  Assistants& assistants() const;
  // The created assistants' store; ApError 400 when the service's store keeps none.
  detail::AssistantStore& assistantStore() const;
  void createAssistant(const httplib::Request& req, httplib::Response& res);
  void getAssistant(const httplib::Request& req, httplib::Response& res);
  void updateAssistant(const httplib::Request& req, httplib::Response& res);
  void deleteAssistant(const httplib::Request& req, httplib::Response& res);
  void assistantVersions(const httplib::Request& req, httplib::Response& res);
  void setLatestAssistant(const httplib::Request& req, httplib::Response& res);
  void searchAssistants(const httplib::Request& req, httplib::Response& res, bool count);
  void readAssistantFields(const nlohmann::json& in, detail::AssistantChange& change) const;
  void mustCreatedAssistant(const std::string& id) const;
  // The profile an assistant id names ("" the workers' default).
  std::string profileOf(const std::string& assistantId) const;
  // The settings a run on the assistant starts from (a created one's current version, else the
  // profile); ApError 404 for an id that is neither, when the served profiles are known.
  void applyAssistant(const std::string& assistantId, SubmitOptions& submit,
                      const std::string& threadId) const;
  nlohmann::json assistantJson(const std::string& assistantId) const;
};

void sendApJson(httplib::Response& res, int status, const nlohmann::json& body);

// "b<batch>-n<messages>", a state's checkpoint id: the view of a batch over the first n stored
// messages. nullopt if `id` is not one.
std::optional<std::pair<size_t, size_t>> parseCheckpoint(const std::string& id);

}  // namespace parley::service
