// WebhookSender: posts a JSON body to a URL a client gave, off the request and worker threads
// (docs/service.md, "Webhooks"): a run's completion (LangGraph's `webhook` on run create) and any
// other event a route wants pushed (A2A push notifications) go through it.
//
// A target is an outside input, so every delivery is bounded and checked: the body, the URL and
// the headers have caps; one post has a timeout; a fixed number of posts run at once and a
// bounded queue holds the rest (past it a delivery is dropped and counted); a failed post (not
// reached, 408, 429, 5xx) is retried with exponential backoff and jitter, then given up on and
// counted. Only https is spoken, redirects are not followed, no proxy is used, and the host is
// resolved by the sender itself: a target any of whose addresses is loopback, private,
// link-local, shared (CGNAT), multicast or reserved is refused unless an option allows it
// (allowLoopback, which also allows http:// to loopback; allowPrivate), and the post goes to the
// addresses that were checked (no second lookup a DNS rebinding could answer differently).
// With a secret, each post carries `X-Parley-Signature-256: sha256=<hex HMAC-SHA256 of the
// body>`; also `X-Parley-Event` and `X-Parley-Delivery` (a unique id, the same on retries).
// Deliveries live in memory only: a process that stops drops what it had not sent.
//
// Ownership: the Service owns it (ServiceState). Thread-safety: every member may be called from
// any thread; the destructor (stop()) waits for the posts in flight, each bounded by `timeout`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "parley/logger.hpp"

namespace parley::service {

struct WebhookOptions {
  // The HMAC-SHA256 key of X-Parley-Signature-256; "" sends no signature.
  std::string secret{};
  bool allowLoopback = false;  // targets on 127.0.0.0/8 or ::1, and http:// to them
  bool allowPrivate = false;   // targets in private, link-local, CGNAT, unique-local ranges
  size_t maxBodyBytes = 256 << 10;
  size_t maxUrlBytes = 2'048;
  size_t maxHeaders = 16;                       // headers a delivery adds (a token, an auth scheme)
  size_t maxHeaderBytes = 4'096;                // one header's name and value
  std::chrono::milliseconds timeout{10'000};    // one post, connection included
  size_t maxConcurrent = 4;                     // posts at once (threads, started on first use)
  size_t maxQueue = 1'000;                      // deliveries waiting, retries included
  int maxRetries = 5;                           // after the first attempt
  std::chrono::milliseconds retryDelay{1'000};  // the first backoff; doubles each retry
  std::chrono::milliseconds maxRetryDelay{60'000};
  // A seam for tests: the addresses (numeric text) a host resolves to. Null: getaddrinfo.
  std::function<std::vector<std::string>(const std::string& host)> resolve{};
  Logger log{};
};

// One post: where, what, and headers of the caller's (e.g. {"Authorization", "Bearer ..."}).
struct WebhookDelivery {
  std::string url;
  std::string event;  // sent as X-Parley-Event ("run.completed")
  std::string body;   // JSON
  std::vector<std::pair<std::string, std::string>> headers{};
  // Once send() has taken it: told once, on a sender thread, how it ended: true when a post was
  // answered 2xx, false when the target refused it, it was given up on, or the sender stopped
  // with it queued. Null: nobody asks.
  std::function<void(bool delivered)> done{};
};

struct WebhookStats {
  uint64_t delivered = 0;  // answered 2xx
  uint64_t failed = 0;     // given up on: refused by the receiver, or out of retries
  uint64_t refused = 0;    // never sent: the target is not allowed or not valid
  uint64_t dropped = 0;    // the queue was full, or the sender stopped with it queued
  uint64_t retries = 0;
};

// Where an address (numeric IPv4 or IPv6 text) belongs; Invalid if it is not one.
enum class AddressKind { Public, Loopback, Private, Invalid };
AddressKind classifyAddress(const std::string& address);

// "sha256=" and the hex HMAC-SHA256 of `body` under `secret`: what X-Parley-Signature-256 holds.
std::string webhookSignature(std::string_view secret, std::string_view body);

class WebhookSender {
 public:
  // ValidationError for options out of range (0 concurrent posts, queue or body cap; a timeout
  // or a delay <= 0; retries < 0).
  explicit WebhookSender(WebhookOptions options);
  ~WebhookSender();
  WebhookSender(const WebhookSender&) = delete;
  WebhookSender& operator=(const WebhookSender&) = delete;

  // Checks a target URL as a request gives it, without resolving it: its size, https (or http
  // when loopback targets are allowed), a host, no user name or password. ValidationError naming
  // the problem (a route answers it as 400).
  void checkUrl(const std::string& url) const;
  // Queues a delivery and returns at once; false (counted, logged) when it cannot be: the URL or
  // a header is invalid, the body is over its cap, the queue is full or the sender stopped.
  bool send(WebhookDelivery delivery);
  // Waits until nothing is queued or being posted, at most `timeout`; true if so.
  bool idle(std::chrono::milliseconds timeout);
  // Ends the threads after the posts in flight; what is queued is dropped. Idempotent.
  void stop();
  WebhookStats stats() const;
  const WebhookOptions& options() const noexcept { return options_; }

 private:
  struct Pending {
    WebhookDelivery delivery;
    std::string id;
    int attempt = 0;
  };
  void work();
  // One post: the HTTP status, 0 when the receiver was not reached, -1 when the target is
  // refused (not retried).
  int post(const Pending& pending);

  WebhookOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;   // the threads: a delivery is due, or the stop
  std::condition_variable quiet_;  // idle(): a delivery was handled
  std::multimap<std::chrono::steady_clock::time_point, Pending> queue_;
  size_t inFlight_ = 0;
  uint64_t nextId_ = 0;
  bool stopping_ = false;
  WebhookStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace parley::service
