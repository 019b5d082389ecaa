// ServiceState: what every route file of the service shares (the run store, the options, the
// event feeds, the metrics) and the lookups they all make (a thread or a run that must exist,
// a thread's view as clients read it). Internal to src/service/; the Service owns it and gives
// each routes file a reference at install time (routes.hpp).
//
// Thread-safety: the members are safe to use from any request thread (RunStore, EventFeeds and
// ServiceMetrics are thread-safe; the options are read-only once serving).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "parley/json.hpp"
#include "parley/run_store.hpp"
#include "service/api.hpp"
#include "service/assistants.hpp"
#include "service/event_feeds.hpp"
#include "service/metrics.hpp"
#include "service/service.hpp"
#include "service/webhooks.hpp"

namespace parley::service {

struct ServiceState {
  std::shared_ptr<RunStore> runs;
  ServiceOptions options;
  std::unique_ptr<EventFeeds> feeds;
  ServiceMetrics metrics;
  std::unique_ptr<WebhookSender> webhooks;  // posts run completions (and A2A notifications)
  std::unique_ptr<Assistants> assistants;   // the profiles' and the created ones

  void log(const std::string& line) const { writeLog(options.log, line); }
  void checkId(const std::string& id, const char* what) const {
    service::checkId(id, what, options.maxIdBytes);
  }
  // 404 unless the thread (run) exists.
  ThreadInfo mustThread(const std::string& id) const;
  RunInfo mustRun(const std::string& id) const;
  // The "id" a body gives a new thread (checked, and not taken), or "" to generate one.
  std::string newThreadId(const nlohmann::json& body) const;
  // The unfinished run of a thread, if any: a context operation must not race its worker.
  std::optional<RunInfo> unfinishedRun(const std::string& threadId) const;
  // The thread as the chat page and clients read it: the visible messages, each with its
  // storage index (which message_added events carry too), and the batch.
  nlohmann::json threadView(const std::string& id) const;
};

}  // namespace parley::service
