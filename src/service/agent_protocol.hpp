// AgentProtocol: the Agent Protocol / LangGraph API routes of `parley serve`, mounted at the root
// (/threads, /runs, /assistants) beside the native /v1 routes (docs/service.md, "Agent Protocol
// and the LangGraph API"). What the official `@langchain/langgraph-sdk` calls maps onto parley's
// threads, runs, batches and the one event vocabulary: a run's stream is an encoding of its
// events (agent_protocol_stream.hpp), its state the thread's visible messages.
//
// Ownership: the Service owns it; it shares the Service's RunStore, EventFeeds and metrics, which
// outlive it.
// Thread-safety: the routes run on the Service's request threads; a stateless run's clean-up
// runs on a thread of its own, started by install() and ended by stop() (or the destructor).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "parley/run_store.hpp"

namespace httplib {
class Server;
}

namespace parley {
struct ServiceOptions;
}

namespace parley::service {

class EventFeeds;
class ServiceMetrics;
class WebhookSender;

struct AgentProtocolContext {
  std::shared_ptr<RunStore> runs;
  EventFeeds* feeds = nullptr;
  ServiceMetrics* metrics = nullptr;
  const ServiceOptions* options = nullptr;
  std::function<void(const std::string&)> log;
  WebhookSender* webhooks = nullptr;  // null: a run's `webhook` is refused
};

class AgentProtocol {
 public:
  explicit AgentProtocol(AgentProtocolContext context);
  ~AgentProtocol();
  AgentProtocol(const AgentProtocol&) = delete;
  AgentProtocol& operator=(const AgentProtocol&) = delete;

  // Registers the routes (before the server starts) and starts the clean-up thread.
  void install(httplib::Server& server);
  // Ends the clean-up thread. Idempotent.
  void stop();

  // The requests that hold their connection for long (a run's stream, a wait, a join): the HTTP
  // front gives each a thread of its own, as it does the native event streams.
  static bool longLived(std::string_view method, std::string_view path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley::service
