#include "client/http_transport.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "client/retry_policy.hpp"
#include "model/blanks.hpp"
#include "model/deadline.hpp"
#include "model/percent_encode.hpp"
#include "model/secrets.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/openai_client.hpp"
#include "parley/telemetry.hpp"
#include "parley/version.hpp"

namespace parley {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the transfer loop looks at its deadlines even when no byte arrives; a stop request
// wakes it at once through curl_multi_wakeup.
constexpr milliseconds kPollInterval{50};
constexpr size_t kMaxIdleConnections = 16;
constexpr size_t kMaxErrorBodyBytes = size_t{64} << 10;

void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One pooled connection: an easy handle and the multi handle whose connection cache keeps its
// socket open between calls.
struct Connection {
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  char errorBuffer[CURL_ERROR_SIZE] = {};

  Connection() : multi(curl_multi_init()), easy(curl_easy_init()) {
    if (!multi || !easy) throw ConnectionError("libcurl could not create a handle");
  }
  ~Connection() {
    if (easy) curl_easy_cleanup(easy);
    if (multi) curl_multi_cleanup(multi);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
};

struct HeaderList {
  curl_slist* list = nullptr;
  void add(const std::string& line) {
    curl_slist* next = curl_slist_append(list, line.c_str());
    if (!next) throw ConnectionError("libcurl could not allocate a header");
    list = next;
  }
  ~HeaderList() { curl_slist_free_all(list); }
};

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

void defaultSleep(milliseconds delay, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any cv;
  std::unique_lock lock(mutex);
  cv.wait_for(lock, stop, delay, [] { return false; });
}

[[noreturn]] void throwCancelled() {
  throw CancelledError("the call was cancelled");
}

[[noreturn]] void throwHandlerStopped() {
  throw CancelledError("the stream was stopped by its chunk handler");
}

std::string describeTimeout(milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

// Why one attempt failed and whether another may follow.
struct Failure {
  std::exception_ptr error;
  bool retryable = false;
  std::optional<milliseconds> serverDelay;
};

enum class Sniffed { Undecided, EventStream, Json };

// What a reply body starts as: an SSE field ("data:", "event:", "id:", "retry:" or a ":"
// comment), or anything else (JSON, text): read whole. Undecided until enough has arrived.
Sniffed sniff(std::string_view body) {
  while (!body.empty() && detail::isBlank(body.front()))
    body.remove_prefix(1);
  if (body.rfind("\xEF\xBB\xBF", 0) == 0) body.remove_prefix(3);  // a UTF-8 BOM
  if (body.empty()) return Sniffed::Undecided;
  if (body.front() == ':') return Sniffed::EventStream;
  for (std::string_view field : {"data:", "event:", "id:", "retry:"}) {
    if (body.rfind(field, 0) == 0) return Sniffed::EventStream;
    if (body.size() < field.size() && field.rfind(body, 0) == 0) return Sniffed::Undecided;
  }
  return Sniffed::Json;
}

// Everything one HTTP exchange collects; the curl callbacks write here.
struct Transfer {
  const HttpTransportOptions* options = nullptr;
  CURL* easy = nullptr;
  HttpReplySink* sink = nullptr;
  bool stream = false;

  HttpReplyInfo reply;
  std::string contentType, retryAfter, retryAfterMs, shouldRetry;
  std::string body;  // a non-streamed body, or an error body
  size_t totalBytes = 0;
  bool decided = false;  // the status and content type have been looked at
  bool eventStream = false;
  bool sniffing = false;  // a stream asked for, answered without a type: is it SSE?
  bool sinkStopped = false;
  std::exception_ptr error;
  Clock::time_point lastByte;

  SseDecoder decoder;

  Transfer(const HttpTransportOptions& opts, HttpReplySink& replySink, bool streaming)
      : options(&opts),
        sink(&replySink),
        stream(streaming),
        decoder(SseDecoder::Options{opts.maxEventBytes, true}) {}

  bool success() const { return reply.status >= 200 && reply.status < 300; }

  bool onEvent(const SseEvent& event) {
    if (sink->onEvent(event, reply)) return true;
    sinkStopped = true;
    return false;
  }

  static size_t onHeader(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const size_t n = size * count;
    std::string_view line(data, n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue, say)
      t->contentType.clear();
      t->reply.requestId.clear();
      t->retryAfter.clear();
      t->retryAfterMs.clear();
      t->shouldRetry.clear();
      return n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return n;
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = detail::trimBlanks(line.substr(colon + 1));
    if (equalsIgnoreCase(name, "content-type")) {
      t->contentType.assign(value);
    } else if (equalsIgnoreCase(name, "x-request-id") || equalsIgnoreCase(name, "request-id")) {
      t->reply.requestId.assign(value);
    } else if (equalsIgnoreCase(name, "retry-after")) {
      t->retryAfter.assign(value);
    } else if (equalsIgnoreCase(name, "retry-after-ms")) {
      t->retryAfterMs.assign(value);
    } else if (equalsIgnoreCase(name, "x-should-retry")) {
      t->shouldRetry.assign(value);
    }
    return n;
  }

  static size_t onWrite(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const size_t n = size * count;
    t->lastByte = Clock::now();
    try {
      return t->write(std::string_view(data, n)) ? n : 0;
    } catch (...) {
      t->error = std::current_exception();
      return 0;  // not n: libcurl aborts the transfer
    }
  }

  bool write(std::string_view bytes) {
    totalBytes += bytes.size();
    if (totalBytes > options->maxResponseBytes) {
      throw ProtocolError("the response is larger than the limit of " +
                          std::to_string(options->maxResponseBytes) + " bytes");
    }
    if (!decided) {
      decided = true;
      long code = 0;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
      reply.status = static_cast<int>(code);
      eventStream =
          stream && success() && contentType.find("text/event-stream") != std::string::npos;
      // Some servers stream SSE as text/plain or with no type at all; JSON is a whole reply.
      sniffing =
          stream && success() && !eventStream && contentType.find("json") == std::string::npos;
    }
    if (sniffing) {
      body.append(bytes);
      const Sniffed kind = sniff(body);
      if (kind == Sniffed::Undecided) return true;
      sniffing = false;
      if (kind == Sniffed::Json) return true;
      eventStream = true;
      const std::string buffered = std::move(body);
      body.clear();
      return decoder.feed(buffered, [this](const SseEvent& e) { return onEvent(e); });
    }
    if (eventStream) {
      return decoder.feed(bytes, [this](const SseEvent& e) { return onEvent(e); });
    }
    if (!success() && body.size() >= kMaxErrorBodyBytes) return true;  // keep the start only
    body.append(bytes);
    return true;
  }
};

class CurlTransport final : public HttpTransport {
 public:
  explicit CurlTransport(HttpTransportOptions options) : options_(std::move(options)) {
    if (options_.maxRetries < 0)
      throw ValidationError("options.maxRetries", "must not be negative");
    if (options_.connectTimeout.count() <= 0 || options_.requestTimeout.count() <= 0 ||
        options_.idleTimeout.count() <= 0 || options_.streamTimeout.count() <= 0) {
      throw ValidationError("options.timeouts",
                            "connect, request, idle and stream timeouts must be > 0");
    }
    if (options_.maxEventBytes == 0 || options_.maxResponseBytes == 0) {
      throw ValidationError("options.limits", "maxEventBytes and maxResponseBytes must be > 0");
    }
    initCurlOnce();
  }

  void send(const HttpRequest& request, HttpReplySink& sink) override;

 private:
  std::unique_ptr<Connection> acquire() {
    {
      std::lock_guard lock(poolMutex_);
      if (!idle_.empty()) {
        auto connection = std::move(idle_.back());
        idle_.pop_back();
        return connection;
      }
    }
    return std::make_unique<Connection>();
  }

  void release(std::unique_ptr<Connection> connection) {
    std::lock_guard lock(poolMutex_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
  }

  double random01() {
    std::lock_guard lock(rngMutex_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }

  std::chrono::system_clock::time_point wallNow() const {
    return options_.now ? options_.now() : std::chrono::system_clock::now();
  }

  void sleep(milliseconds delay, std::stop_token stop) const {
    if (options_.sleep) {
      options_.sleep(delay, stop);
    } else {
      defaultSleep(delay, stop);
    }
  }

  void sendWithRetries(const HttpRequest& request, HttpReplySink& sink);

  // One exchange. Returns true when the sink has the reply; false with `failure` filled when
  // the exchange failed in a way a retry may mend; throws when no retry can.
  bool attempt(const HttpRequest& request, HttpReplySink& sink,
               std::optional<Clock::time_point> deadline, Failure& failure);

  const HttpTransportOptions options_;
  std::mutex poolMutex_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::mutex rngMutex_;
  std::mt19937_64 rng_{std::random_device{}()};
};

void CurlTransport::send(const HttpRequest& request, HttpReplySink& sink) {
  try {
    sendWithRetries(request, sink);
  } catch (...) {
    // What the server sent back (an error body, an error event) may repeat the key.
    detail::rethrowRedacted(detail::secretHeaderValues(request.headers));
  }
}

void CurlTransport::sendWithRetries(const HttpRequest& request, HttpReplySink& sink) {
  std::optional<Clock::time_point> deadline;
  if (request.timeout && request.timeout->count() > 0)
    deadline = detail::deadlineAfter(Clock::now(), *request.timeout);

  for (int retry = 0;; ++retry) {
    if (request.stopToken.stop_requested()) throwCancelled();
    Failure failure;
    sink.reset();
    if (attempt(request, sink, deadline, failure)) return;
    if (!failure.retryable || retry >= options_.maxRetries) std::rethrow_exception(failure.error);
    const milliseconds delay =
        failure.serverDelay ? *failure.serverDelay : detail::defaultBackoff(retry, random01());
    // The per-call timeout bounds the retries too: when the wait would pass it, the caller
    // learns the real cause (the last failure) now rather than a timeout later.
    if (deadline && Clock::now() + delay >= *deadline) std::rethrow_exception(failure.error);
    sleep(delay, request.stopToken);
    if (request.stopToken.stop_requested()) throwCancelled();
  }
}

bool CurlTransport::attempt(const HttpRequest& request, HttpReplySink& sink,
                            std::optional<Clock::time_point> deadline, Failure& failure) {
  const std::string target(request.url);
  const std::string url = redactUrl(target);  // for messages; the request goes to `target`
  const bool stream = request.stream;
  std::unique_ptr<Connection> connection = acquire();
  CURL* easy = connection->easy;
  CURLM* multi = connection->multi;
  Transfer transfer(options_, sink, stream);
  transfer.easy = easy;

  HeaderList headers;
  headers.add("Content-Type: application/json");
  headers.add(stream ? "Accept: text/event-stream" : "Accept: application/json");
  headers.add("Expect:");  // no 100-continue round trip for large bodies
  for (const std::string& line : request.headers)
    headers.add(line);
  // The trace the call belongs to, for a provider or proxy that records it (docs/telemetry.md).
  if (telemetryEnabled()) {
    const TraceContext trace = currentTraceContext();
    if (trace.valid()) {
      headers.add("traceparent: " + trace.traceparent());
      if (!trace.traceState.empty()) headers.add("tracestate: " + trace.traceState);
    }
  }

  connection->errorBuffer[0] = '\0';
  curl_easy_setopt(easy, CURLOPT_URL, target.c_str());
  if (request.method == HttpMethod::Get) {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "parley/" PARLEY_VERSION);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 64L * 1024);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connectTimeout.count()));
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, connection->errorBuffer);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Transfer::onHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Transfer::onWrite);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);

  const Clock::time_point start = Clock::now();
  transfer.lastByte = start;
  if (curl_multi_add_handle(multi, easy) != CURLM_OK) {
    throw ConnectionError("libcurl could not start the request");
  }

  enum class Stop { None, Cancelled, CallDeadline, RequestTimeout, IdleTimeout, StreamTimeout };
  Stop stopped = Stop::None;
  CURLcode code = CURLE_OK;
  {
    std::stop_callback wake(request.stopToken, [multi] { curl_multi_wakeup(multi); });
    int running = 1;
    while (true) {
      if (curl_multi_perform(multi, &running) != CURLM_OK) {
        code = CURLE_FAILED_INIT;
        break;
      }
      if (running == 0) break;
      const Clock::time_point now = Clock::now();
      if (request.stopToken.stop_requested()) {
        stopped = Stop::Cancelled;
        break;
      }
      Clock::time_point wakeAt = now + kPollInterval;
      if (deadline) {
        if (now >= *deadline) {
          stopped = Stop::CallDeadline;
          break;
        }
        wakeAt = std::min(wakeAt, *deadline);
      }
      const Clock::time_point limit =
          stream ? transfer.lastByte + options_.idleTimeout : start + options_.requestTimeout;
      if (now >= limit) {
        stopped = stream ? Stop::IdleTimeout : Stop::RequestTimeout;
        break;
      }
      wakeAt = std::min(wakeAt, limit);
      if (stream) {
        if (now >= start + options_.streamTimeout) {
          stopped = Stop::StreamTimeout;
          break;
        }
        wakeAt = std::min(wakeAt, start + options_.streamTimeout);
      }
      const auto waitMs = std::chrono::ceil<milliseconds>(wakeAt - now).count();
      curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::max<int64_t>(waitMs, 1)), nullptr);
    }
    if (stopped == Stop::None && code == CURLE_OK) {
      int queued = 0;
      while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
        if (message->msg == CURLMSG_DONE && message->easy_handle == easy) {
          code = message->data.result;
        }
      }
    }
  }
  curl_multi_remove_handle(multi, easy);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  if (transfer.reply.status == 0) transfer.reply.status = static_cast<int>(status);
  const std::string curlMessage =
      connection->errorBuffer[0] ? connection->errorBuffer : curl_easy_strerror(code);
  release(std::move(connection));

  auto fail = [&](std::exception_ptr error, bool retryable) {
    failure.error = std::move(error);
    failure.retryable = retryable && !sink.delivered();
    return false;
  };

  switch (stopped) {
    case Stop::Cancelled:
      throwCancelled();
    case Stop::CallDeadline:
      throw TimeoutError("the call did not finish within its timeout of " +
                         describeTimeout(*request.timeout));
    case Stop::RequestTimeout:
      return fail(std::make_exception_ptr(TimeoutError("no complete response from " + url +
                                                       " within the request timeout of " +
                                                       describeTimeout(options_.requestTimeout))),
                  true);
    case Stop::IdleTimeout:
      return fail(std::make_exception_ptr(TimeoutError("the stream from " + url +
                                                       " was silent for the idle timeout of " +
                                                       describeTimeout(options_.idleTimeout))),
                  true);
    case Stop::StreamTimeout:
      return fail(std::make_exception_ptr(TimeoutError(
                      "the stream from " + url + " did not end within the stream timeout of " +
                      describeTimeout(options_.streamTimeout))),
                  true);
    case Stop::None:
      break;
  }
  if (transfer.sinkStopped) throwHandlerStopped();
  if (transfer.error) {
    // An error the reply carried (an `error` event) is retried as its status would be.
    bool retryable = false;
    try {
      std::rethrow_exception(transfer.error);
    } catch (const HttpError& e) {
      retryable = detail::shouldRetryStatus(e.status(), "");
    } catch (...) {
    }
    return fail(transfer.error, retryable);
  }

  // Status first: an error body is the server's answer even if the connection then broke.
  transfer.reply.status = static_cast<int>(status);
  if (status != 0 && !transfer.success()) {
    HttpError::Details details;
    details.status = transfer.reply.status;
    details.body = transfer.body;
    details.requestId = transfer.reply.requestId;
    detail::readApiError(transfer.body, details);
    failure.serverDelay =
        detail::serverRetryDelay(transfer.retryAfterMs, transfer.retryAfter, wallNow());
    return fail(std::make_exception_ptr(HttpError(std::move(details))),
                detail::shouldRetryStatus(transfer.reply.status, transfer.shouldRetry));
  }

  if (code != CURLE_OK) {
    // A stream cut after its end has delivered the whole reply.
    if (transfer.eventStream && sink.streamComplete()) {
      sink.onStreamEnd(transfer.reply);
      return true;
    }
    if (code == CURLE_OPERATION_TIMEDOUT) {
      return fail(std::make_exception_ptr(
                      TimeoutError("connecting to " + url + " timed out (" + curlMessage + ")")),
                  true);
    }
    std::string what = transfer.totalBytes > 0 ? "the connection to " + url + " broke: "
                                               : "could not connect to " + url + ": ";
    return fail(std::make_exception_ptr(ConnectionError(what + curlMessage)), true);
  }

  if (transfer.eventStream) {
    transfer.decoder.finish([&transfer](const SseEvent& e) { return transfer.onEvent(e); });
    if (transfer.sinkStopped) throwHandlerStopped();
    sink.onStreamEnd(transfer.reply);  // ProtocolError if the stream was cut short
    return true;
  }

  if (transfer.body.empty()) throw ProtocolError("the server sent an empty response");
  sink.onBody(transfer.body, transfer.reply);
  return true;
}

}  // namespace

std::shared_ptr<HttpTransport> makeCurlTransport(HttpTransportOptions options) {
  return std::make_shared<CurlTransport>(std::move(options));
}

namespace detail {

std::optional<std::chrono::system_clock::time_point>& replayedReceivedAt() noexcept {
  thread_local std::optional<std::chrono::system_clock::time_point> at;
  return at;
}

ChatResult withReplayedTime(ChatResult result) noexcept {
  if (auto& at = replayedReceivedAt()) {
    result.message.receivedAt = *at;
    at.reset();
  }
  return result;
}

namespace {

// ClientOptions::apiKeyInQuery: the key the client put in its x-goog-api-key header goes on the
// URL instead. Done below the cassettes, which key and redact the request as the client made it.
class QueryKeyTransport final : public HttpTransport {
 public:
  explicit QueryKeyTransport(std::shared_ptr<HttpTransport> next) : next_(std::move(next)) {}

  void send(const HttpRequest& request, HttpReplySink& sink) override {
    static constexpr std::string_view kHeader = "x-goog-api-key:";
    std::vector<std::string> headers;
    std::string key;
    for (const std::string& line : request.headers) {
      const std::string_view text = line;
      if (equalsIgnoreCase(text.substr(0, kHeader.size()), kHeader)) {
        key = detail::trimBlanks(text.substr(kHeader.size()));
      } else {
        headers.push_back(line);
      }
    }
    if (key.empty()) return next_->send(request, sink);
    std::string url(request.url);
    url += url.find('?') == std::string::npos ? "?key=" : "&key=";
    url += percentEncode(key);
    HttpRequest moved = request;
    moved.url = url;
    moved.headers = headers;
    next_->send(moved, sink);
  }

 private:
  std::shared_ptr<HttpTransport> next_;
};

}  // namespace

std::shared_ptr<HttpTransport> keyInQueryTransport(std::shared_ptr<HttpTransport> next) {
  return std::make_shared<QueryKeyTransport>(std::move(next));
}

namespace {

std::shared_ptr<HttpTransport> plainTransportFor(const ClientOptions& options) {
  if (options.apiKeyInQuery) {
    ClientOptions inner = options;
    inner.apiKeyInQuery = false;
    return keyInQueryTransport(plainTransportFor(inner));
  }
  if (options.transport) return options.transport;
  HttpTransportOptions http;
  http.connectTimeout = options.connectTimeout;
  http.requestTimeout = options.requestTimeout;
  http.idleTimeout = options.idleTimeout;
  http.streamTimeout = options.streamTimeout;
  http.maxRetries = options.maxRetries;
  http.maxEventBytes = options.maxEventBytes;
  http.maxResponseBytes = options.maxResponseBytes;
  http.now = options.now;
  http.sleep = options.sleep;
  return makeCurlTransport(std::move(http));
}

}  // namespace

std::shared_ptr<HttpTransport> transportFor(const ClientOptions& options) {
  std::optional<CassetteOptions> cassettes =
      options.cassettes ? options.cassettes : cassetteOptionsFromEnv();
  if (!cassettes) return plainTransportFor(options);
  // A replay opens no connection: the real transport is made when a request must be sent.
  return makeCassetteTransport(std::move(*cassettes),
                               [options] { return plainTransportFor(options); }, {options.apiKey});
}

namespace {

std::string apiCodeText(const nlohmann::json& code) {
  if (code.is_string()) return code.get<std::string>();
  if (code.is_null()) return {};
  return code.dump();
}

}  // namespace

void readApiError(std::string_view body, HttpError::Details& details) {
  nlohmann::json value = parseJson(body, {}, false);
  if (value.is_discarded() || !value.is_object()) return;
  const nlohmann::json* error = &value;
  if (auto it = value.find("error"); it != value.end()) {
    if (it->is_string()) {  // {"error": "text"} (some proxies)
      details.apiMessage = it->get<std::string>();
      return;
    }
    if (!it->is_object()) return;
    error = &*it;
  }
  if (auto it = error->find("message"); it != error->end() && it->is_string()) {
    details.apiMessage = it->get<std::string>();
  }
  if (auto it = error->find("type"); it != error->end() && it->is_string()) {
    details.apiType = it->get<std::string>();
  }
  if (auto it = error->find("code"); it != error->end()) details.apiCode = apiCodeText(*it);
}

std::string joinUrl(std::string_view base, std::string_view path) {
  while (!base.empty() && base.back() == '/')
    base.remove_suffix(1);
  std::string url;
  url.reserve(base.size() + path.size());
  url.append(base).append(path);
  return url;
}

ClientOptions checkedClientOptions(ClientOptions options) {
  if (options.baseUrl.rfind("http://", 0) != 0 && options.baseUrl.rfind("https://", 0) != 0) {
    throw ValidationError("options.baseUrl", "must start with http:// or https://, got \"" +
                                                 redactUrl(options.baseUrl) + "\"");
  }
  if (options.maxRetries < 0) throw ValidationError("options.maxRetries", "must not be negative");
  if (options.apiKeyInQuery && options.protocol != Protocol::Gemini) {
    throw ValidationError("options.apiKeyInQuery",
                          "only the gemini protocol takes its key on the URL (?key=)");
  }
  // A header is sent as the line "name: value": a CR or LF in either would end it and start
  // another header (or the body) of the caller's choosing.
  for (const auto& [name, value] : options.headers) {
    const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    });
    if (!token) throw ValidationError("options.headers", "\"" + name + "\" is not a header name");
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos)
      throw ValidationError("options.headers." + name, "must not contain CR, LF or NUL");
  }
  if (options.apiKey.empty() && !options.apiKeyEnv.empty()) {
    if (const char* key = std::getenv(options.apiKeyEnv.c_str())) options.apiKey = key;
  }
  return options;
}

std::vector<std::string> headerLines(std::vector<std::string> first, const ClientOptions& options) {
  for (const auto& [name, value] : options.headers)
    first.push_back(name + ": " + value);
  return first;
}

}  // namespace detail

}  // namespace parley
