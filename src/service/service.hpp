// Service: the HTTP API over the durable runs (`parley serve`; docs/service.md lists the routes,
// the errors and the caps).
//
// It serves threads (create, list, read, delete, fork, context operations), runs (submit with a
// double-texting policy, read, cancel, respond) and each thread's event log as Server-Sent
// Events, from the RunStore it is given: any number of services and workers may share one
// database. An event written by any process reaches the streams of every service (the RunStore's
// wake-ups: NOTIFY on PostgreSQL, polling on SQLite). It also serves the chat page at `/`,
// `/healthz` and `/metrics` (Prometheus text).
//
// Security: with `authTokens` every /v1 route wants `Authorization: Bearer <one of them>`;
// without, the service only binds to a loopback address (the constructor refuses another).
// Requests are read by a hardened front (src/http/server.hpp: head deadline and caps, a
// connection cap, bodies capped as read, a bounded worker pool) before any route runs. Only the
// service's own Host names are served (DNS rebinding), a state-changing request must be
// `application/json` and come from no foreign Origin (cross-site requests), failed
// authentication is rate limited per client address, each token is rate limited, CORS headers
// are sent only for `corsOrigin`, ids are checked before they reach the store, and nothing of a
// model's configuration (API keys) is ever answered. docs/service.md has the policy.
//
// Internal (not installed: src/service/, library parley_service); `parley serve` is its host.
// Ownership: the caller owns the service; it shares the RunStore.
// Thread-safety: start(), stop() and the accessors may be called from any thread; requests are
// served on a pool of `threads` threads, a stream's request on a thread of its own, and its
// events by `streamThreads` threads for all the streams (a stream waiting for events holds none).
// Lifetime: the destructor stops the service.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parley/a2a.hpp"
#include "parley/cost.hpp"
#include "parley/logger.hpp"
#include "parley/run_store.hpp"
#include "service/webhooks.hpp"

namespace parley {

struct ServiceOptions {
  std::string host = "127.0.0.1";  // without authTokens: a loopback address only
  int port = 0;                    // 0: any free port (read it back with port())
  // Bearer tokens, any of which a request may present; empty: no authentication (loopback).
  std::vector<std::string> authTokens{};
  // "" sends no CORS headers; else the one origin allowed (Access-Control-Allow-Origin), which
  // may then also send state-changing requests.
  std::string corsOrigin{};
  // The names a request's Host may give (DNS rebinding): "name" or "name:port" ("[::1]" for an
  // IPv6 address); "*" allows any. Empty: the loopback names (localhost, 127.0.0.1, [::1]) and
  // `host`, with the bound port; with authTokens on an address that is not loopback, any.
  // Past it: 403 host_not_allowed.
  std::vector<std::string> allowedHosts{};
  // Threads serving requests (a stream's request has a thread of its own until its response
  // starts, up to maxStreams); 0: 16.
  int threads = 0;
  // Threads writing the event streams (every kind: the native, Agent Protocol, OpenAI, UI and
  // A2A streams) that have news; a stream waiting for its next event is parked and holds none
  // (docs/service.md, "The HTTP front"). 0: each stream keeps a thread of its own instead.
  size_t streamThreads = 4;
  // What a stream's client has not taken yet; a write past it cuts the stream (its client may
  // resume it with Last-Event-ID). A stream whose client takes nothing for 5 s is cut too.
  size_t maxStreamBuffer = 1 << 20;
  size_t maxBodyBytes = 1 << 20;  // a request body, sized or chunked; past it: 413
  // The HTTP front (docs/service.md): connections open at once, the time and size of a request's
  // head (request line and headers), and how long a keep-alive connection may idle.
  size_t maxConnections = 4'096;
  std::chrono::milliseconds headTimeout{10'000};  // past it: 408
  size_t maxHeadBytes = 16 << 10;                 // past it: 431
  size_t maxHeaders = 100;                        // header lines; past it: 431
  size_t maxEventBytes = 256 << 10;  // one event's data as sent; past it the event's payload is
                                     // replaced by {"truncated": true, "bytes": n}
  size_t maxStreams = 1'000;         // event streams open at once; past it: 503
  // Requests per second per token, with a burst of rateBurst; past it: 429 with Retry-After.
  // 0 turns the limit off; without authTokens there is none (loopback only). /metrics is not
  // counted.
  double ratePerSecond = 50;
  double rateBurst = 100;
  // Failed authentications per client address: authFailureBurst at once, then one per
  // 1/authFailuresPerSecond; past it every authenticated request of that address gets 429 with
  // Retry-After, whatever its token, until the bucket refills. A table of at most
  // maxRateLimitedClients addresses.
  double authFailuresPerSecond = 0.2;
  double authFailureBurst = 10;
  size_t maxRateLimitedClients = 10'000;
  size_t maxPage = 1'000;  // GET /v1/threads?limit=
  size_t maxIdBytes = 128;
  // A comment line on an idle event stream this often, so that proxies keep it open.
  std::chrono::milliseconds heartbeat{15'000};
  // An idle keep-alive connection is closed after this long.
  std::chrono::milliseconds keepAlive{5'000};
  // /healthz checks the whole database (SQLite: PRAGMA quick_check) at most this often, and
  // answers from the last check meanwhile (a cheap read is done every time).
  std::chrono::milliseconds integrityCheckEvery{60'000};
  // While telemetry is on (OTEL_EXPORTER_OTLP_ENDPOINT), the queue's depth is read this often and
  // recorded as parley.run.queue.depth (docs/telemetry.md).
  std::chrono::milliseconds queueDepthEvery{10'000};
  // The OpenAI-compatible endpoints (docs/service.md): the profiles the workers serve, which
  // GET /v1/models lists and a request's `model` must name (empty: any name goes to the workers
  // as the run's profile), and how long such a request waits for its run (past it: 504, the run
  // is cancelled).
  std::vector<std::string> models{};
  // Prices of the models replies name, for POST /v1/costs (the chat page's cost per reply);
  // null: none known (every reply unpriced).
  std::shared_ptr<const PriceTable> prices{};
  std::chrono::milliseconds openAiRunTimeout{600'000};
  // Webhooks on a run's completion (a LangGraph run's `webhook`; docs/service.md, "Webhooks"):
  // the signing secret, which targets are allowed, the caps. Its log is `log` when null.
  service::WebhookOptions webhooks{};
  // Signs the A2A Agent Card and the extended card (docs/a2a.md, "Signed Agent Card"); null:
  // they are served unsigned.
  std::shared_ptr<const A2aCardSigner> a2aCardSigner{};
  Logger log{};  // diagnostics; null: stderr
};

class Service {
 public:
  // ValidationError for a null store, options out of range, or a host that is not loopback
  // without authTokens.
  Service(std::shared_ptr<RunStore> runs, ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Binds and serves; returns once connections are accepted. Error if the address cannot be
  // bound. Once only.
  void start();
  // Stops accepting, ends the open streams and joins the threads. Idempotent.
  void stop();

  int port() const;             // after start()
  std::string baseUrl() const;  // "http://HOST:PORT"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
