// The Streamable HTTP transport (MCP 2025-11-25, "Transports"): every message is a POST to the
// server's one endpoint; a request's answer comes back on its POST as one JSON body or as an SSE
// stream that may carry the server's own requests and notifications first. After the handshake
// the `Mcp-Session-Id` the server assigned and the negotiated `MCP-Protocol-Version` go on every
// request, and a GET opens the server's stream for messages outside any request (405: it has
// none). A broken stream is resumed with a GET carrying `Last-Event-ID`. A 404 for a request that
// carries the session id means the session is gone: the connection is closed, and McpClient
// starts a new one. close() ends the session with a DELETE. A 401, or a 403 with
// error="insufficient_scope", goes to McpOAuth (mcp_oauth.hpp) when sign-in is configured, and
// the message is sent again with the new token.
//
// 2026-07-28 (stateless, useProtocol()): no session id is kept, no GET stream opened, no DELETE
// sent and a broken stream is not resumed (the request fails); every request carries
// MCP-Protocol-Version, Mcp-Method and, for tools/call, resources/read and prompts/get, Mcp-Name
// (base64 in the specification's =?base64?...?= form when it is not plain visible ASCII).
//
// Each request's POST runs on a thread of the transport's, one per request in flight (bounded by
// the callers), kept for the next request when it ends (at most kMaxIdleWorkers wait), over a
// pool of libcurl handles kept for reuse so connections stay alive between calls. A transfer is
// ended at once (close(), abandon()) by waking its multi handle.
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "model/blanks.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/part.hpp"
#include "parley/sse.hpp"
#include "tools/mcp_oauth.hpp"
#include "tools/mcp_transport.hpp"

namespace parley::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMaxResumes = 2;                   // GETs with Last-Event-ID for one broken stream
constexpr milliseconds kDefaultRetry{1000};      // before a resume, unless the server said `retry:`
constexpr int kMaxGetStreamFailures = 3;         // the server's GET stream, failures in a row
constexpr milliseconds kDrainAfterAnswer{1000};  // a request's stream left open after its answer

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// A header value as 2026-07-28 requires it: as is when it is visible ASCII with inner spaces
// only, else (and when it looks like the sentinel itself) =?base64?...?=.
std::string headerValue(const std::string& value) {
  bool plain =
      !value.empty() && value.front() != ' ' && value.back() != ' ' &&
      std::all_of(value.begin(), value.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
      });
  bool sentinel = value.rfind("=?base64?", 0) == 0 && value.size() >= 11 &&
                  value.compare(value.size() - 2, 2, "?=") == 0;
  if (plain && !sentinel) return value;
  return "=?base64?" + base64Encode(value) + "?=";
}

struct HeaderList {
  curl_slist* list = nullptr;
  HeaderList() = default;
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  ~HeaderList() { curl_slist_free_all(list); }
  void add(const std::string& line) {
    curl_slist* grown = curl_slist_append(list, line.c_str());
    if (!grown) throw std::bad_alloc();
    list = grown;
  }
};

// A libcurl easy handle with a multi handle of its own, so that another thread can wake the
// transfer (curl_multi_wakeup) and end it at once.
struct Handle {
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
  Handle() : easy(curl_easy_init()), multi(curl_multi_init()) {
    if (!easy || !multi) {
      cleanup();
      throw ConnectionError("libcurl could not be initialised");
    }
  }
  ~Handle() { cleanup(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  void cleanup() {
    if (multi) curl_multi_cleanup(multi);
    if (easy) curl_easy_cleanup(easy);
    multi = nullptr;
    easy = nullptr;
  }
};

// One HTTP exchange: what came back, and what the body decoded to.
struct Exchange {
  enum class Kind { Request, Message, Stream };  // a request's POST, a notification's, a GET

  Kind kind = Kind::Request;
  std::optional<int64_t> requestId;
  McpRouting routing;  // stateless revisions: the Mcp-Method and Mcp-Name headers
  std::atomic<bool> aborted{false};
  CURLM* multi = nullptr;  // set while the transfer runs (under the transport's mutex)

  long status = 0;
  std::string wwwAuthenticate;    // the server's challenge, with a 401 or 403
  std::string sentAuthorization;  // the Authorization header the request carried
  bool sse = false;
  bool typeKnown = false;
  std::string body;  // a JSON body, or an error's
  std::unique_ptr<SseDecoder> decoder;
  std::string lastEventId;
  std::optional<int64_t> retryMs;
  bool answered = false;       // the response to requestId arrived
  bool sawEvent = false;       // at least one event arrived
  std::exception_ptr failure;  // a limit passed while reading
};

class HttpTransport final : public McpTransport {
 public:
  HttpTransport(const McpServerOptions& options, std::shared_ptr<McpOAuth> oauth)
      : options_(options), oauth_(std::move(oauth)) {}
  ~HttpTransport() override { close(); }

  void start(McpTransportEvents events) override { events_ = std::move(events); }

  void send(const std::string& text, std::optional<int64_t> requestId, Clock::time_point deadline,
            const McpRouting& routing) override {
    if (closing_.load())
      throw ConnectionError("MCP server \"" + options_.name + "\": the connection is closed");
    if (!requestId) {
      postMessage(text, deadline);
      return;
    }
    std::lock_guard lock(mutex_);
    reapWorkers();
    jobs_.push_back([this, text, id = *requestId, routing] { runRequest(text, id, routing); });
    // A thread for each request no waiting thread will take.
    if (jobs_.size() > idleWorkers_) {
      auto done = std::make_shared<std::atomic<bool>>(false);
      workers_.push_back({std::thread([this, done] {
                            runJobs();
                            done->store(true);
                          }),
                          done});
    } else {
      work_.notify_one();
    }
  }

  void sendAnswer(const std::string& text) override {
    // A POST takes longer than a write to a pipe: a little more than kAnswerWait.
    postMessage(text,
                Clock::now() + std::min<milliseconds>(options_.requestTimeout, 4 * kAnswerWait));
  }

  void abandon(int64_t id) override {
    std::lock_guard lock(mutex_);
    for (Exchange* exchange : active_) {
      if (exchange->requestId == id) abortLocked(*exchange);
    }
  }

  void useProtocol(const std::string& protocolVersion, bool stateless) override {
    std::lock_guard lock(mutex_);
    protocolVersion_ = protocolVersion;
    stateless_ = stateless;
    sessionId_.clear();
  }

  void handshakeDone(const std::string& protocolVersion) override {
    std::unique_lock lock(mutex_);
    protocolVersion_ = protocolVersion;
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([this, done] {
                          runGetStream();
                          done->store(true);
                          std::lock_guard ready(mutex_);
                          getStreamAnswered_ = true;
                          wake_.notify_all();
                        }),
                        done});
    // The server's stream is open (or refused) before the next request goes out, so that what
    // the server sends outside a request has a stream to go to (a short, bounded wait).
    wake_.wait_for(lock, kGetStreamWait, [&] { return getStreamAnswered_ || closing_.load(); });
  }

  void close() override {
    std::lock_guard closeLock(closeMutex_);
    if (closed_) return;
    closed_ = true;
    stop_.request_stop();  // a sign-in in progress
    std::vector<Worker> workers;
    {
      std::lock_guard lock(mutex_);
      closing_.store(true);
      for (Exchange* exchange : active_)
        abortLocked(*exchange);
      jobs_.clear();  // requests not started end as those under way do: unanswered
      workers = std::move(workers_);
    }
    wake_.notify_all();
    work_.notify_all();
    for (Worker& worker : workers)
      worker.thread.join();
    // End the session on the server (it may answer 405: it does not let clients end sessions).
    std::string session = sessionId();
    if (!session.empty()) {
      Exchange exchange;
      exchange.kind = Exchange::Kind::Message;
      auto deadline = Clock::now() + std::min<milliseconds>(options_.requestTimeout, kDeleteWait);
      try {
        perform("DELETE", "", exchange, deadline, {}, /*registered=*/false);
      } catch (const Error&) {
        // The server is gone already; nothing to end.
      }
    }
  }

 private:
  static constexpr milliseconds kDeleteWait{2000};
  static constexpr milliseconds kGetStreamWait{1000};  // handshakeDone(), for the GET's answer

  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  std::string who() const { return "MCP server \"" + options_.name + "\""; }

  std::string sessionId() const {
    std::lock_guard lock(mutex_);
    return sessionId_;
  }

  bool stateless() const {
    std::lock_guard lock(mutex_);
    return stateless_;
  }

  // A request thread: runs queued requests, then waits for more; ends when the transport closes
  // or kMaxIdleWorkers others wait already. (Starting a thread per request cost a call more CPU
  // than the rest of the client's side, and under load a new thread waits longest for a core.)
  void runJobs() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (closing_.load()) return;
      if (!jobs_.empty()) {
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        lock.unlock();
        job();
        lock.lock();
        continue;
      }
      if (idleWorkers_ >= kMaxIdleWorkers) return;
      ++idleWorkers_;
      work_.wait(lock);
      --idleWorkers_;
    }
  }

  void reapWorkers() {  // mutex_ held
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void abortLocked(Exchange& exchange) {
    exchange.aborted.store(true);
    if (exchange.multi) curl_multi_wakeup(exchange.multi);
  }

  std::unique_ptr<Handle> acquire() {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        auto handle = std::move(idle_.back());
        idle_.pop_back();
        return handle;
      }
    }
    return std::make_unique<Handle>();
  }

  void release(std::unique_ptr<Handle> handle) {
    curl_easy_reset(handle->easy);
    std::lock_guard lock(mutex_);
    if (idle_.size() < kMaxIdleHandles) idle_.push_back(std::move(handle));
  }

  struct WriteContext {
    HttpTransport* transport;
    Exchange* exchange;
    CURL* easy;
  };

  // Takes the session id as soon as it arrives: the handshake's next message needs it, and the
  // session learns of the initialize answer from the body, before the transfer ends.
  static size_t onHeader(char* data, size_t size, size_t count, void* user) {
    auto* context = static_cast<WriteContext*>(user);
    std::string_view line(data, size * count);
    // The status line of the server's GET stream: it is open (or refused).
    if (context->exchange->kind == Exchange::Kind::Stream && line.rfind("HTTP/", 0) == 0) {
      std::lock_guard lock(context->transport->mutex_);
      context->transport->getStreamAnswered_ = true;
      context->transport->wake_.notify_all();
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return size * count;
    std::string name = lower(std::string(line.substr(0, colon)));
    if (name == "mcp-session-id") {
      std::lock_guard lock(context->transport->mutex_);
      // 2026-07-28 has no sessions: an id a server sends anyway is not sent back.
      if (!context->transport->stateless_)
        context->transport->sessionId_ = std::string(trimBlanks(line.substr(colon + 1)));
    } else if (name == "www-authenticate" && context->exchange->wwwAuthenticate.size() < 4096) {
      context->exchange->wwwAuthenticate = std::string(trimBlanks(line.substr(colon + 1)));
    }
    return size * count;
  }

  static size_t onWrite(char* data, size_t size, size_t count, void* user) {
    auto* context = static_cast<WriteContext*>(user);
    return context->transport->write(*context, std::string_view(data, size * count)) ? size * count
                                                                                     : 0;
  }

  // Returns false to end the transfer.
  bool write(WriteContext& context, std::string_view bytes) {
    Exchange& exchange = *context.exchange;
    if (exchange.aborted.load()) return false;
    if (!exchange.typeKnown) {
      exchange.typeKnown = true;
      curl_easy_getinfo(context.easy, CURLINFO_RESPONSE_CODE, &exchange.status);
      char* type = nullptr;
      curl_easy_getinfo(context.easy, CURLINFO_CONTENT_TYPE, &type);
      exchange.sse =
          exchange.status / 100 == 2 && type && lower(type).rfind("text/event-stream", 0) == 0;
      if (exchange.sse) {
        SseDecoder::Options sseOptions;
        sseOptions.maxEventBytes = options_.maxMessageBytes;
        exchange.decoder = std::make_unique<SseDecoder>(sseOptions);
      }
    }
    if (!exchange.sse) {
      if (exchange.body.size() + bytes.size() > options_.maxMessageBytes) {
        exchange.failure = std::make_exception_ptr(
            ProtocolError(who() + " sent a response larger than " +
                          std::to_string(options_.maxMessageBytes) + " bytes (maxMessageBytes)"));
        return false;
      }
      exchange.body.append(bytes);
      return true;
    }
    try {
      return exchange.decoder->feed(bytes, [&](const SseEvent& event) {
        exchange.sawEvent = true;
        exchange.lastEventId = event.lastEventId;
        if (event.retry) exchange.retryMs = *event.retry;
        if (event.type != "message" || event.data.empty()) return true;
        McpReceived received = events_.onMessage(event.data);
        if (received.fatal) {
          // A server that floods requests and does not take the answers: the session is over.
          exchange.failure = received.fatal;
          closeOnce(received.fatal);
          return false;
        }
        if (!received.valid) ++nonJson_;
        if (exchange.requestId && received.responseTo == exchange.requestId) {
          exchange.answered = true;  // the server closes the stream next (see perform())
        }
        return !exchange.aborted.load();
      });
    } catch (const ProtocolError& e) {
      exchange.failure =
          std::make_exception_ptr(ProtocolError(who() + ": " + e.what() + " (maxMessageBytes)"));
      return false;
    }
  }

  // Runs one HTTP exchange to its end. `registered`: listed in active_ so that close() and
  // abandon() can end it. Returns the libcurl result; the exchange holds the rest.
  CURLcode perform(const char* method, const std::string& body, Exchange& exchange,
                   std::optional<Clock::time_point> deadline, const std::string& lastEventId,
                   bool registered = true) {
    std::unique_ptr<Handle> handle = acquire();
    CURL* easy = handle->easy;
    HeaderList headers;
    if (std::string_view(method) == "POST") {
      headers.add("Content-Type: application/json");
      headers.add("Accept: application/json, text/event-stream");
    } else if (std::string_view(method) == "GET") {
      headers.add("Accept: text/event-stream");
    }
    {
      std::lock_guard lock(mutex_);
      if (!sessionId_.empty()) headers.add("Mcp-Session-Id: " + sessionId_);
      if (!protocolVersion_.empty()) headers.add("MCP-Protocol-Version: " + protocolVersion_);
    }
    if (!exchange.routing.method.empty()) {
      headers.add("Mcp-Method: " + headerValue(exchange.routing.method));
      if (!exchange.routing.name.empty())
        headers.add("Mcp-Name: " + headerValue(exchange.routing.name));
      // An empty value is sent as an empty header ("Name;" in libcurl; "Name:" would drop it).
      for (const auto& [name, value] : exchange.routing.params)
        headers.add(value.empty() ? "Mcp-Param-" + name + ";"
                                  : "Mcp-Param-" + name + ": " + headerValue(value));
    }
    if (!lastEventId.empty()) headers.add("Last-Event-ID: " + lastEventId);
    exchange.sentAuthorization =
        oauth_ ? oauth_->authorization(stop_.get_token())
               : (options_.bearerToken.empty() ? "" : "Bearer " + options_.bearerToken);
    if (!exchange.sentAuthorization.empty())
      headers.add("Authorization: " + exchange.sentAuthorization);
    for (const auto& [name, value] : options_.headers)
      headers.add(name + ": " + value);
    headers.add("Expect:");

    char errorBuffer[CURL_ERROR_SIZE] = {0};
    WriteContext context{this, &exchange, easy};
    curl_easy_setopt(easy, CURLOPT_URL, options_.url.c_str());
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    if (std::string_view(method) == "POST") {
      curl_easy_setopt(easy, CURLOPT_POST, 1L);
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    } else if (std::string_view(method) == "GET") {
      curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "parley/" PARLEY_VERSION);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options_.requestTimeout.count()));
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errorBuffer);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &HttpTransport::onHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &context);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &HttpTransport::onWrite);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &context);

    CURLM* multi = handle->multi;
    curl_multi_add_handle(multi, easy);
    if (registered) {
      std::lock_guard lock(mutex_);
      exchange.multi = multi;
      active_.push_back(&exchange);
      if (closing_.load()) exchange.aborted.store(true);
    }
    CURLcode code = CURLE_OK;
    bool timedOut = false, drained = false;
    std::optional<Clock::time_point> drainUntil;
    for (;;) {
      int running = 0;
      if (curl_multi_perform(multi, &running) != CURLM_OK) {
        code = CURLE_FAILED_INIT;
        break;
      }
      if (running == 0) {
        int queued = 0;
        while (CURLMsg* message = curl_multi_info_read(multi, &queued))
          if (message->msg == CURLMSG_DONE) code = message->data.result;
        break;
      }
      if (exchange.aborted.load()) break;
      // After the answer the server should end the stream; one that keeps it open is left.
      if (exchange.answered && !drainUntil) drainUntil = Clock::now() + kDrainAfterAnswer;
      if (drainUntil && Clock::now() >= *drainUntil) {
        drained = true;
        break;
      }
      int waitMs = 1000;
      if (deadline) {
        auto left = std::chrono::ceil<milliseconds>(*deadline - Clock::now()).count();
        if (left <= 0) {
          timedOut = true;
          break;
        }
        waitMs = static_cast<int>(std::min<int64_t>(left, waitMs));
      }
      curl_multi_poll(multi, nullptr, 0, waitMs, nullptr);
    }
    if (registered) {
      std::lock_guard lock(mutex_);
      active_.erase(std::find(active_.begin(), active_.end(), &exchange));
      exchange.multi = nullptr;
    }
    curl_multi_remove_handle(multi, easy);
    if (exchange.status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &exchange.status);
    std::string curlMessage = errorBuffer[0] ? errorBuffer : curl_easy_strerror(code);
    // A transfer we ended ourselves (or a reused connection in an unknown state) is not reused.
    if (code == CURLE_OK && !exchange.aborted.load() && !timedOut && !drained)
      release(std::move(handle));
    if (timedOut) throw TimeoutError(who() + ": no answer to the HTTP " + method + " in time");
    if (exchange.aborted.load() || exchange.failure || exchange.answered) return code;
    if (code != CURLE_OK && code != CURLE_WRITE_ERROR)
      throw ConnectionError(who() + " at " + options_.url + ": " + curlMessage);
    return code;
  }

  // The error for a non-2xx answer: the JSON-RPC error's message when the body has one.
  HttpError httpError(const Exchange& exchange) const {
    HttpError::Details details;
    details.status = static_cast<int>(exchange.status);
    details.body = exchange.body;
    auto parsed = parseJson(exchange.body, {}, false);
    if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
      const auto& error = parsed["error"];
      if (error.contains("message") && error["message"].is_string())
        details.apiMessage = error["message"].get<std::string>();
    }
    return HttpError(details);
  }

  // 404 to a request that carried the session id: the server ended the session.
  bool sessionEnded(const Exchange& exchange) {
    if (exchange.status != 404 || sessionId().empty()) return false;
    closeOnce(std::make_exception_ptr(
        ConnectionError(who() + " ended the session (HTTP 404 for session " + sessionId() + ")")));
    return true;
  }

  void closeOnce(std::exception_ptr why) {
    if (closedEventSent_.exchange(true) || closing_.load()) return;
    events_.onClosed(std::move(why));
  }

  // The server refused the credentials (401), or wants more scopes (403 insufficient_scope):
  // true when a sign-in (or refresh) happened and the request should be sent again.
  bool signInAgain(const Exchange& exchange, int& attempts) {
    if (!oauth_) return false;
    if (exchange.status != 401 &&
        !(exchange.status == 403 &&
          parseBearerChallenge(exchange.wwwAuthenticate).error == "insufficient_scope"))
      return false;
    oauth_->challenged(static_cast<int>(exchange.status), exchange.wwwAuthenticate,
                       exchange.sentAuthorization, attempts, stop_.get_token());
    return !closing_.load();
  }

  // A notification or a response: the server accepts it with 202 and no body.
  void postMessage(const std::string& text, Clock::time_point deadline) {
    for (int attempts = 0;;) {
      Exchange exchange;
      exchange.kind = Exchange::Kind::Message;
      perform("POST", text, exchange, deadline, {});
      if (exchange.failure) std::rethrow_exception(exchange.failure);
      if (exchange.status / 100 == 2) return;
      if (signInAgain(exchange, attempts)) continue;
      if (sessionEnded(exchange)) throw ConnectionError(who() + " ended the session (HTTP 404)");
      throw httpError(exchange);
    }
  }

  void failRequest(int64_t id, std::exception_ptr why) {
    if (!closing_.load()) events_.onRequestFailed(id, std::move(why));
  }

  // A request's POST, and the resumption of its stream if it breaks before the answer.
  void runRequest(const std::string& text, int64_t id, const McpRouting& routing) {
    try {
      int attempts = 0;
      for (;;) {
        Exchange exchange;
        exchange.requestId = id;
        exchange.routing = routing;
        perform("POST", text, exchange, std::nullopt, {});
        if (exchange.aborted.load() || exchange.answered) return;
        if (!exchange.failure && signInAgain(exchange, attempts)) continue;
        return finishRequest(exchange, id);
      }
    } catch (const Error&) {
      failRequest(id, std::current_exception());
    }
  }

  // Each error is made in a statement before the one that hands it over: the temporary it is
  // copied from is gone before the waiting thread can read the copy (their message buffer is
  // shared, counted by libstdc++'s atomics, which ThreadSanitizer does not see).
  void finishRequest(Exchange& exchange, int64_t id) {
    if (exchange.failure) return failRequest(id, exchange.failure);
    if (exchange.status / 100 != 2) {
      auto why =
          sessionEnded(exchange)
              ? std::make_exception_ptr(ConnectionError(who() + " ended the session (HTTP 404)"))
              : std::make_exception_ptr(httpError(exchange));
      return failRequest(id, std::move(why));
    }
    if (!exchange.sse) {
      McpReceived received = events_.onMessage(exchange.body);
      if (received.responseTo == id) return;
      auto why = std::make_exception_ptr(
          ProtocolError(who() + " answered the POST of request " + std::to_string(id) + " with " +
                        (exchange.body.empty() ? "an empty body"
                                               : "something else: " + mcpExcerpt(exchange.body))));
      return failRequest(id, std::move(why));
    }
    // The stream ended before the answer: resume it where it broke, if the server gave ids
    // (2026-07-28 has no resumption: the request is lost).
    bool resumable = !exchange.lastEventId.empty() && !stateless();
    for (int resume = 0; resume < kMaxResumes && resumable; ++resume) {
      if (!waitBeforeRetry(exchange.retryMs ? milliseconds(*exchange.retryMs) : kDefaultRetry))
        return;
      Exchange again;
      again.requestId = id;
      again.lastEventId = exchange.lastEventId;
      perform("GET", "", again, std::nullopt, exchange.lastEventId);
      if (again.aborted.load() || again.answered) return;
      if (again.failure) return failRequest(id, again.failure);
      if (again.status / 100 != 2 || !again.sse) break;
      if (!again.lastEventId.empty()) exchange.lastEventId = again.lastEventId;
      if (again.retryMs) exchange.retryMs = again.retryMs;
    }
    failRequest(
        id, std::make_exception_ptr(ConnectionError(who() + " closed the stream of request " +
                                                    std::to_string(id) + " before answering it")));
  }

  // Waits `delay` unless the transport closes first; false if it did.
  bool waitBeforeRetry(milliseconds delay) {
    std::unique_lock lock(mutex_);
    return !wake_.wait_for(lock, delay, [&] { return closing_.load(); });
  }

  // The server's stream for messages outside any request; resumed after a break, given up
  // after kMaxGetStreamFailures breaks in a row or a 405 (the server offers none).
  void runGetStream() {
    std::string lastEventId;
    std::optional<int64_t> retryMs;
    for (int failures = 0; failures < kMaxGetStreamFailures && !closing_.load();) {
      Exchange exchange;
      exchange.kind = Exchange::Kind::Stream;
      try {
        perform("GET", "", exchange, std::nullopt, lastEventId);
      } catch (const Error&) {
        ++failures;
      }
      if (closing_.load() || exchange.aborted.load()) return;
      if (exchange.status == 405 || exchange.failure) return;
      if (sessionEnded(exchange)) return;
      if (exchange.status / 100 != 2 || !exchange.sse) return;
      if (exchange.sawEvent) failures = 0;
      ++failures;
      if (!exchange.lastEventId.empty()) lastEventId = exchange.lastEventId;
      if (exchange.retryMs) retryMs = exchange.retryMs;
      if (!waitBeforeRetry(retryMs ? milliseconds(*retryMs) : kDefaultRetry)) return;
    }
  }

  static constexpr std::size_t kMaxIdleHandles = 8;
  static constexpr std::size_t kMaxIdleWorkers = 8;

  const McpServerOptions options_;
  const std::shared_ptr<McpOAuth> oauth_;
  std::stop_source stop_;  // requested by close(): ends a sign-in
  McpTransportEvents events_;
  mutable std::mutex mutex_;  // everything below
  std::condition_variable wake_;
  std::vector<Worker> workers_;
  std::condition_variable work_;            // a request is queued, or the transport closes
  std::deque<std::function<void()>> jobs_;  // requests no thread has taken yet
  std::size_t idleWorkers_ = 0;             // request threads waiting on work_
  std::vector<Exchange*> active_;
  std::vector<std::unique_ptr<Handle>> idle_;
  std::string sessionId_;
  std::string protocolVersion_;
  bool stateless_ = false;          // a 2026-07-28 revision (useProtocol())
  bool getStreamAnswered_ = false;  // the server's GET stream has a status line (or ended)
  std::atomic<bool> closing_{false};
  std::atomic<bool> closedEventSent_{false};
  std::atomic<int> nonJson_{0};
  std::mutex closeMutex_;
  bool closed_ = false;

 public:
  int nonJsonLines() const override { return nonJson_.load(); }
};

}  // namespace

std::unique_ptr<McpTransport> makeHttpTransport(const McpServerOptions& options,
                                                std::shared_ptr<McpOAuth> oauth) {
  return std::make_unique<HttpTransport>(options, std::move(oauth));
}

}  // namespace parley::detail
