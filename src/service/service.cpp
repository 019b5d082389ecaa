// `parley serve` (docs/service.md): the HTTP front of src/http/, the checks of admission.hpp
// before any route, /healthz, /metrics and the chat page; the routes of each resource live in
// their own file (routes.hpp).
#include "service/service.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http/server.hpp"
#include "parley/errors.hpp"
#include "parley/logger.hpp"
#include "parley/otlp.hpp"
#include "parley/telemetry.hpp"
#include "service/admission.hpp"
#include "service/agent_protocol.hpp"
#include "service/api.hpp"
#include "service/chat_page.hpp"
#include "service/openai_endpoints.hpp"
#include "service/reply_costs.hpp"
#include "service/routes.hpp"
#include "service/service_state.hpp"
#include "service/thread_titles.hpp"
#include "service/ui_streams.hpp"

namespace parley {

using json = nlohmann::json;
using namespace service;

struct Service::Impl {
  ServiceState state;
  const ServiceOptions& options;
  std::unique_ptr<http::Server> server;          // made by install()
  std::unique_ptr<AgentProtocol> agentProtocol;  // the LangGraph routes, at the root
  service::Admission admission;
  // /healthz: the last integrity check's time and its failure ("" when it passed).
  std::mutex healthMutex;
  std::chrono::steady_clock::time_point checkedAt{};
  bool checked = false;
  std::string damage;
  std::atomic<bool> stopping{false};
  bool started = false;
  std::atomic<int> port{0};
  std::mutex stopMutex;
  // The queue's depth for OTLP (parley.run.queue.depth): read from the database every
  // queueDepthEvery while telemetry is on, by a thread started with the service.
  std::thread sampler;
  std::mutex samplerMutex;
  std::condition_variable samplerWake;
  bool samplerStop = false;

  // An up-down counter's sum is the depth: each sample adds what changed since the last one.
  void sampleQueueDepth() {
    int64_t reported = 0;
    std::unique_lock lock(samplerMutex);
    while (!samplerWake.wait_for(lock, options.queueDepthEvery, [&] { return samplerStop; })) {
      if (!telemetryEnabled()) continue;
      lock.unlock();
      try {
        const auto counts = state.runs->countRuns();
        const auto queued = counts.find(RunStatus::Queued);
        const int64_t depth = queued == counts.end() ? 0 : queued->second;
        if (depth != reported) addCounter("parley.run.queue.depth", depth - reported, {});
        reported = depth;
      } catch (const std::exception& e) {
        state.log(std::string("parley serve: reading the queue's depth: ") + e.what());
      }
      lock.lock();
    }
  }

  Impl(std::shared_ptr<RunStore> r, ServiceOptions o)
      : state{std::move(r), std::move(o), nullptr, {}, nullptr, nullptr},
        options(state.options),
        admission(state.options) {
    state.feeds =
        std::make_unique<EventFeeds>(state.runs, options.maxEventBytes, 4'096, options.log);
    WebhookOptions webhooks = options.webhooks;
    if (!webhooks.log) webhooks.log = options.log;
    state.webhooks = std::make_unique<WebhookSender>(std::move(webhooks));
    state.assistants = std::make_unique<Assistants>(*state.runs, state.options);
  }

  void health(httplib::Response& res) {
    try {
      state.runs->threads().threadInfo("healthz");
      checkIntegrity();
      sendJson(res, 200, {{"status", "ok"}});
    } catch (const std::exception& e) {
      state.log(std::string("parley serve: health check: ") + e.what());
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
        state.runs->checkIntegrity();
        damage.clear();
      } catch (const std::exception& e) {
        damage = e.what();
      }
      checked = true;
      checkedAt = now;
    }
    if (!damage.empty()) throw StoreError(damage);
  }

  std::string metricsPage() {
    return state.metrics.render(state.runs->countRuns(), state.feeds->streams()) +
           "# HELP parley_event_log_polls_total Polls of the followed threads' event logs (one "
           "query for all).\n"
           "# TYPE parley_event_log_polls_total counter\n"
           "parley_event_log_polls_total " +
           std::to_string(state.feeds->polls()) +
           "\n# HELP parley_event_log_reads_total Reads of a followed thread's events after a "
           "poll saw it move.\n"
           "# TYPE parley_event_log_reads_total counter\n"
           "parley_event_log_reads_total " +
           std::to_string(state.feeds->reads()) + "\n" + telemetryMetrics();
  }

  // The GenAI and run-queue metrics of the OTLP exporter, when one is installed
  // (docs/telemetry.md).
  static std::string telemetryMetrics() {
    auto exporter = std::dynamic_pointer_cast<OtlpExporter>(telemetry());
    return exporter ? exporter->prometheusText() : std::string();
  }

  void cors(httplib::Response& res) const {
    if (options.corsOrigin.empty()) return;
    res.set_header("Access-Control-Allow-Origin", options.corsOrigin);
    res.set_header("Vary", "Origin");
  }

  // The checks before any route (Admission); Handled when refused.
  httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res) {
    state.metrics.requestStarted();
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
    limits.streamThreads = options.streamThreads;
    limits.maxStreamBuffer = options.maxStreamBuffer;
    limits.maxBodyBytes = options.maxBodyBytes;
    limits.maxConnections = options.maxConnections;
    limits.headTimeout = options.headTimeout;
    limits.maxHeadBytes = options.maxHeadBytes;
    limits.maxHeaders = options.maxHeaders;
    limits.idleTimeout = options.keepAlive;
    // The Agent Protocol's streams and waits, the OpenAI-compatible routes and the UI streams
    // follow a run: long-lived too.
    limits.longLived = [](std::string_view method, std::string_view target) {
      const std::string_view path = target.substr(0, target.find('?'));
      return isLongLivedRequest(method, target) || AgentProtocol::longLived(method, path) ||
             isOpenAiLongLived(method, path) || isUiStreamLongLived(method, path) ||
             isA2aLongLived(method, path);
    };
    server = std::make_unique<http::Server>(limits);
    auto& server = *this->server;
    server.set_keep_alive_max_count(1000);
    server.set_keep_alive_timeout(std::max<time_t>(
        1, std::chrono::duration_cast<std::chrono::seconds>(options.keepAlive).count()));
    server.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return admit(req, res); });
    server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (!req.path.ends_with("/events") && !req.path.ends_with("/stream")) {
        state.metrics.requestDone(res.status);
      }
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
      res.set_header("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, X-Api-Key, Content-Type, Last-Event-ID");
      res.set_header("Access-Control-Max-Age", "600");
    });

    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(service::chatPage()), "text/html; charset=utf-8");
    });
    server.Get("/healthz",
               [this](const httplib::Request&, httplib::Response& res) { health(res); });
    server.Get("/metrics", handle(options.log, [this](auto&, httplib::Response& res) {
                 res.set_content(metricsPage(), "text/plain; version=0.0.4");
               }));
    installThreadRoutes(server, state);
    installRunRoutes(server, state);
    installEventRoutes(server, state);
    agentProtocol = std::make_unique<AgentProtocol>(state);
    agentProtocol->install(server);
    installOpenAiRoutes(server, state);
    installUiStreamRoutes(server, state);
    installThreadTitleRoutes(server, state);
    installReplyCostRoutes(server, state);
    installA2aRoutes(server, state);
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
  if (options.maxStreamBuffer < 4'096) {
    throw ValidationError("maxStreamBuffer", "must be 4 096 bytes at least");
  }
  if (options.maxEventBytes < 256) throw ValidationError("maxEventBytes", "must be 256 at least");
  if (options.maxPage == 0) throw ValidationError("maxPage", "must be positive");
  if (options.maxIdBytes == 0) throw ValidationError("maxIdBytes", "must be positive");
  if (options.heartbeat.count() <= 0) throw ValidationError("heartbeat", "must be positive");
  if (options.openAiRunTimeout.count() <= 0) {
    throw ValidationError("openAiRunTimeout", "must be positive");
  }
  if (options.ratePerSecond < 0) throw ValidationError("ratePerSecond", "must not be negative");
  if (options.queueDepthEvery.count() <= 0) {
    throw ValidationError("queueDepthEvery", "must be positive");
  }
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
  s.sampler = std::thread([&s] { s.sampleQueueDepth(); });
}

void Service::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  std::lock_guard lock(s.stopMutex);
  if (s.stopping.exchange(true)) return;
  // Every stream ends, and is given a moment to write its end before the sockets close.
  s.state.feeds->stop(std::chrono::seconds(2));
  s.agentProtocol->stop();
  s.server->shutdown();
  s.state.webhooks->stop();  // after the routes: the posts in flight end within their timeout
  {
    std::lock_guard samplerLock(s.samplerMutex);
    s.samplerStop = true;
  }
  s.samplerWake.notify_all();
  if (s.sampler.joinable()) s.sampler.join();
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
