#include "parley/openai_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "client/request_body.hpp"
#include "client/retry_policy.hpp"
#include "client/stream_assembler.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/sse.hpp"

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

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

void defaultSleep(milliseconds delay, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any cv;
  std::unique_lock lock(mutex);
  cv.wait_for(lock, stop, delay, [] { return false; });
}

// Why one attempt failed and whether another may follow.
struct Failure {
  std::exception_ptr error;
  bool retryable = false;
  std::optional<milliseconds> serverDelay;
};

// Everything one HTTP exchange collects; the curl callbacks write here.
struct Transfer {
  const ClientOptions* options = nullptr;
  CURL* easy = nullptr;
  const ChunkHandler* onChunk = nullptr;
  bool stream = false;

  int status = 0;
  std::string contentType, requestId, retryAfter, retryAfterMs, shouldRetry;
  std::string body;  // a non-streamed body, or an error body
  size_t totalBytes = 0;
  bool decided = false;  // the status and content type have been looked at
  bool eventStream = false;
  bool delivered = false;  // onChunk has been called: the call can no longer be retried
  bool handlerStopped = false;
  std::exception_ptr error;
  Clock::time_point lastByte;

  SseDecoder decoder;
  detail::StreamAssembler assembler;

  Transfer(const ClientOptions& opts, const ChunkHandler* handler, bool streaming)
      : options(&opts),
        onChunk(handler),
        stream(streaming),
        decoder(SseDecoder::Options{opts.maxEventBytes, true}) {}

  bool success() const { return status >= 200 && status < 300; }

  bool onEvent(const SseEvent& event) {
    if (assembler.sawDone()) return true;  // nothing after [DONE] counts
    if (event.data == "[DONE]") {
      assembler.markDone();
      return true;
    }
    if (event.type == "error") {
      HttpError::Details details;
      details.status = status;
      details.body = event.data;
      details.requestId = requestId;
      detail::readApiError(event.data, details);
      if (details.apiMessage.empty()) details.apiMessage = "the server sent an error event";
      throw HttpError(std::move(details));
    }
    if (event.data.empty()) return true;
    const StreamDelta* delta;
    try {
      delta = &assembler.addChunk(event.data);
    } catch (const HttpError& e) {
      HttpError::Details details = e.details();
      if (details.status == 0) details.status = status;
      details.requestId = requestId;
      throw HttpError(std::move(details));
    }
    if (!delta->empty() && onChunk && *onChunk) {
      delivered = true;
      if (!(*onChunk)(*delta)) {
        handlerStopped = true;
        return false;
      }
    }
    return true;
  }

  static size_t onHeader(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const size_t n = size * count;
    std::string_view line(data, n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue, say)
      t->contentType.clear();
      t->requestId.clear();
      t->retryAfter.clear();
      t->retryAfterMs.clear();
      t->shouldRetry.clear();
      return n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return n;
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trimmed(line.substr(colon + 1));
    if (equalsIgnoreCase(name, "content-type")) {
      t->contentType.assign(value);
    } else if (equalsIgnoreCase(name, "x-request-id")) {
      t->requestId.assign(value);
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
      status = static_cast<int>(code);
      eventStream =
          stream && success() && contentType.find("text/event-stream") != std::string::npos;
    }
    if (eventStream) {
      return decoder.feed(bytes, [this](const SseEvent& e) { return onEvent(e); });
    }
    if (!success() && body.size() >= kMaxErrorBodyBytes) return true;  // keep the start only
    body.append(bytes);
    return true;
  }
};

}  // namespace

struct OpenAiClient::Impl {
  ClientOptions options;
  std::string url;
  std::string authorization;
  std::mutex poolMutex;
  std::vector<std::unique_ptr<Connection>> idle;
  std::mutex rngMutex;
  std::mt19937_64 rng{std::random_device{}()};

  std::unique_ptr<Connection> acquire() {
    {
      std::lock_guard lock(poolMutex);
      if (!idle.empty()) {
        auto connection = std::move(idle.back());
        idle.pop_back();
        return connection;
      }
    }
    return std::make_unique<Connection>();
  }

  void release(std::unique_ptr<Connection> connection) {
    std::lock_guard lock(poolMutex);
    if (idle.size() < kMaxIdleConnections) idle.push_back(std::move(connection));
  }

  double random01() {
    std::lock_guard lock(rngMutex);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }

  std::chrono::system_clock::time_point wallNow() const {
    return options.now ? options.now() : std::chrono::system_clock::now();
  }

  void sleep(milliseconds delay, std::stop_token stop) const {
    if (options.sleep) {
      options.sleep(delay, stop);
    } else {
      defaultSleep(delay, stop);
    }
  }

  ChatResult call(const ChatRequest& request, bool stream, const ChunkHandler* onChunk);
  // One POST with retries. `rawJson`: the body is any JSON reply (kept in ChatResult::raw),
  // not a chat completion.
  ChatResult send(const std::string& body, const std::string& target, const ChatRequest& request,
                  bool stream, const ChunkHandler* onChunk, bool rawJson);
  std::optional<ChatResult> attempt(const std::string& body, const std::string& target,
                                    const ChatRequest& request, bool stream,
                                    const ChunkHandler* onChunk, bool rawJson,
                                    std::optional<Clock::time_point> deadline, Failure& failure);
};

namespace {

[[noreturn]] void throwCancelled() {
  throw CancelledError("the call was cancelled");
}

std::string describeTimeout(milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

}  // namespace

OpenAiClient::OpenAiClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.baseUrl.rfind("http://", 0) != 0 && options.baseUrl.rfind("https://", 0) != 0) {
    throw ValidationError("options.baseUrl", "must start with http:// or https://, got \"" +
                                                 redactUrl(options.baseUrl) + "\"");
  }
  if (options.maxRetries < 0) throw ValidationError("options.maxRetries", "must not be negative");
  if (options.connectTimeout.count() <= 0 || options.requestTimeout.count() <= 0 ||
      options.idleTimeout.count() <= 0) {
    throw ValidationError("options.timeouts", "connect, request and idle timeouts must be > 0");
  }
  if (options.maxEventBytes == 0 || options.maxResponseBytes == 0) {
    throw ValidationError("options.limits", "maxEventBytes and maxResponseBytes must be > 0");
  }
  if (options.apiKey.empty() && !options.apiKeyEnv.empty()) {
    if (const char* key = std::getenv(options.apiKeyEnv.c_str())) options.apiKey = key;
  }
  initCurlOnce();
  std::string base = options.baseUrl;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  impl_->url = base + "/chat/completions";
  if (!options.apiKey.empty()) impl_->authorization = "Authorization: Bearer " + options.apiKey;
  impl_->options = std::move(options);
}

OpenAiClient::~OpenAiClient() = default;

const ClientOptions& OpenAiClient::options() const noexcept {
  return impl_->options;
}

MessageJsonOptions OpenAiClient::messageJsonOptions() const noexcept {
  return MessageJsonOptions{impl_->options.emptyToolCallContent};
}

std::string OpenAiClient::requestBody(const ChatRequest& request, bool stream) const {
  return detail::buildRequestBody(request, impl_->options, stream);
}

ChatResult OpenAiClient::generate(const ChatRequest& request) {
  return impl_->call(request, request.stream, nullptr);
}

ChatResult OpenAiClient::generateStream(const ChatRequest& request, const ChunkHandler& onChunk) {
  return impl_->call(request, true, &onChunk);
}

ChatResult OpenAiClient::Impl::call(const ChatRequest& request, bool stream,
                                    const ChunkHandler* onChunk) {
  return send(detail::buildRequestBody(request, options, stream), url, request, stream, onChunk,
              false);
}

ChatResult OpenAiClient::Impl::send(const std::string& body, const std::string& target,
                                    const ChatRequest& request, bool stream,
                                    const ChunkHandler* onChunk, bool rawJson) {
  std::optional<Clock::time_point> deadline;
  if (request.timeout && request.timeout->count() > 0) deadline = Clock::now() + *request.timeout;

  for (int retry = 0;; ++retry) {
    if (request.stopToken.stop_requested()) throwCancelled();
    Failure failure;
    if (auto result = attempt(body, target, request, stream, onChunk, rawJson, deadline, failure)) {
      return *result;
    }
    if (!failure.retryable || retry >= options.maxRetries) std::rethrow_exception(failure.error);
    const milliseconds delay =
        failure.serverDelay ? *failure.serverDelay : detail::defaultBackoff(retry, random01());
    // The per-call timeout bounds the retries too: when the wait would pass it, the caller
    // learns the real cause (the last failure) now rather than a timeout later.
    if (deadline && Clock::now() + delay >= *deadline) std::rethrow_exception(failure.error);
    sleep(delay, request.stopToken);
    if (request.stopToken.stop_requested()) throwCancelled();
  }
}

std::optional<ChatResult> OpenAiClient::Impl::attempt(const std::string& body,
                                                      const std::string& target,
                                                      const ChatRequest& request, bool stream,
                                                      const ChunkHandler* onChunk, bool rawJson,
                                                      std::optional<Clock::time_point> deadline,
                                                      Failure& failure) {
  const std::string url = redactUrl(target);  // for messages; the request goes to `target`
  std::unique_ptr<Connection> connection = acquire();
  CURL* easy = connection->easy;
  CURLM* multi = connection->multi;
  Transfer transfer(options, onChunk, stream);
  transfer.easy = easy;

  HeaderList headers;
  headers.add("Content-Type: application/json");
  headers.add(stream ? "Accept: text/event-stream" : "Accept: application/json");
  headers.add("Expect:");  // no 100-continue round trip for large bodies
  if (!authorization.empty()) headers.add(authorization);
  for (const auto& [name, value] : options.headers)
    headers.add(name + ": " + value);

  connection->errorBuffer[0] = '\0';
  curl_easy_setopt(easy, CURLOPT_URL, target.c_str());
  curl_easy_setopt(easy, CURLOPT_POST, 1L);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "parley/0.1.0");
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 64L * 1024);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connectTimeout.count()));
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

  enum class Stop { None, Cancelled, CallDeadline, RequestTimeout, IdleTimeout };
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
          stream ? transfer.lastByte + options.idleTimeout : start + options.requestTimeout;
      if (now >= limit) {
        stopped = stream ? Stop::IdleTimeout : Stop::RequestTimeout;
        break;
      }
      wakeAt = std::min(wakeAt, limit);
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
  if (transfer.status == 0) transfer.status = static_cast<int>(status);
  const std::string curlMessage =
      connection->errorBuffer[0] ? connection->errorBuffer : curl_easy_strerror(code);
  release(std::move(connection));

  auto fail = [&](std::exception_ptr error, bool retryable) -> std::optional<ChatResult> {
    failure.error = std::move(error);
    failure.retryable = retryable && !transfer.delivered;
    return std::nullopt;
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
                                                       describeTimeout(options.requestTimeout))),
                  true);
    case Stop::IdleTimeout:
      return fail(std::make_exception_ptr(TimeoutError("the stream from " + url +
                                                       " was silent for the idle timeout of " +
                                                       describeTimeout(options.idleTimeout))),
                  true);
    case Stop::None:
      break;
  }
  if (transfer.handlerStopped) throw CancelledError("the stream was stopped by its chunk handler");
  if (transfer.error) return fail(transfer.error, false);

  // Status first: an error body is the server's answer even if the connection then broke.
  transfer.status = static_cast<int>(status);
  if (status != 0 && !transfer.success()) {
    HttpError::Details details;
    details.status = transfer.status;
    details.body = transfer.body;
    details.requestId = transfer.requestId;
    detail::readApiError(transfer.body, details);
    failure.serverDelay =
        detail::serverRetryDelay(transfer.retryAfterMs, transfer.retryAfter, wallNow());
    return fail(std::make_exception_ptr(HttpError(std::move(details))),
                detail::shouldRetryStatus(transfer.status, transfer.shouldRetry));
  }

  if (code != CURLE_OK) {
    // A stream cut after its finish reason has delivered the whole reply.
    if (transfer.eventStream && transfer.assembler.sawFinishReason())
      return transfer.assembler.finish();
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
    if (transfer.handlerStopped)
      throw CancelledError("the stream was stopped by its chunk handler");
    return transfer.assembler.finish();  // ProtocolError if the stream was cut short
  }

  if (transfer.body.empty()) throw ProtocolError("the server sent an empty response");
  if (rawJson) {
    ChatResult raw;
    raw.raw = parseJson(transfer.body, {}, /*allowExceptions=*/false);
    if (raw.raw.is_discarded())
      throw ProtocolError("the server's reply from " + url + " is not JSON");
    return raw;
  }
  ChatResult result = detail::resultFromCompletion(transfer.body);
  if (stream && onChunk && *onChunk) {
    // The server ignored "stream": hand the whole reply over as one delta.
    StreamDelta delta;
    delta.content = result.message.content;
    if (auto r = result.message.extra.find("reasoning_content");
        r != result.message.extra.end() && r->is_string()) {
      delta.reasoning = r->get<std::string>();
    }
    for (size_t i = 0; i < result.message.toolCalls.size(); ++i) {
      const ToolCall& call = result.message.toolCalls[i];
      delta.toolCalls.push_back(ToolCallDelta{i, call.id, call.name, call.arguments});
    }
    delta.usage = result.usage;
    delta.finishReason = result.reportedFinishReason;
    if (!(*onChunk)(delta)) throw CancelledError("the stream was stopped by its chunk handler");
  }
  return result;
}

EmbeddingResult OpenAiClient::createEmbeddings(const std::vector<std::string>& inputs,
                                               const std::string& model,
                                               std::optional<milliseconds> timeout,
                                               std::stop_token stopToken) {
  if (inputs.empty()) throw ValidationError("inputs", "must hold at least one text");
  if (model.empty()) throw ValidationError("model", "must name an embedding model");
  ChatRequest request;  // carries the timeout and the stop token
  request.timeout = timeout;
  request.stopToken = std::move(stopToken);
  const nlohmann::json body = {{"model", model}, {"input", inputs}, {"encoding_format", "float"}};
  std::string target = impl_->options.baseUrl;
  while (!target.empty() && target.back() == '/')
    target.pop_back();
  target += "/embeddings";
  ChatResult reply = impl_->send(body.dump(), target, request, false, nullptr, true);

  EmbeddingResult result;
  result.raw = std::move(reply.raw);
  const nlohmann::json& data = result.raw.contains("data") ? result.raw["data"] : nlohmann::json();
  if (!data.is_array()) throw ProtocolError("the embeddings reply has no \"data\" array");
  result.embeddings.resize(data.size());
  for (const nlohmann::json& item : data) {
    const size_t index = item.value("index", size_t{0});
    const nlohmann::json* vector = item.contains("embedding") ? &item["embedding"] : nullptr;
    if (index >= data.size() || !vector || !vector->is_array()) {
      throw ProtocolError("the embeddings reply has a malformed item");
    }
    auto& values = result.embeddings[index];
    values.reserve(vector->size());
    for (const nlohmann::json& v : *vector) {
      if (!v.is_number()) throw ProtocolError("the embeddings reply has a non-numeric value");
      values.push_back(v.get<float>());
    }
  }
  if (auto usage = result.raw.find("usage"); usage != result.raw.end()) {
    result.usage = usageFromJson(*usage);
  }
  return result;
}

std::string redactUrl(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const std::size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const std::size_t at = url.substr(start, end - start).rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  std::string shown(url.substr(0, start));
  shown += "***";
  shown.append(url.substr(start + at));
  return shown;
}

}  // namespace parley
