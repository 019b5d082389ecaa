// The HTTP seam below every protocol client: one request with its deadlines and retries, the reply
// streamed into a sink. A protocol client (OpenAiClient for Chat Completions, ...) writes the
// request body and reads the reply; the transport does everything in between: the connection
// pool, the four deadlines, retries, classifying failures into the errors of errors.hpp, the
// size caps, and decoding a 2xx text/event-stream into events. Swap it (ClientOptions::transport)
// where a test or an embedding program needs control over the wire.
//
// Retries follow the official OpenAI SDKs: connection errors, timeouts, 408, 409, 429 and >= 500
// (Anthropic's 529 "overloaded" too) are retried maxRetries times (an `x-should-retry:
// true|false` response header overrides), waiting `retry-after-ms`, `Retry-After` (seconds or
// an HTTP date) when the server says and that is at most 60 s, else min(0.5 s * 2^retry, 8 s)
// less up to 25 % jitter. A reply that has already delivered something to its caller
// (HttpReplySink::delivered()) is never retried.
//
// Thread-safety: one transport may serve any number of calls from any number of threads at once
// (the libcurl one keeps a pool of connections). A sink belongs to one call.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>

#include "parley/sse.hpp"

namespace parley {

enum class HttpMethod { Post, Get };

// One request: a POST of a JSON body, or a GET (listing models). The views must outlive
// HttpTransport::send().
struct HttpRequest {
  std::string_view url;
  std::string_view body;  // sent as application/json
  // "Name: value" lines sent after Content-Type and Accept (authorization, versions, ...).
  std::span<const std::string> headers;
  // Ask for text/event-stream; a 2xx event stream is then decoded into HttpReplySink::onEvent.
  bool stream = false;
  // Bounds the whole call, retries and their waits included. nullopt or <= 0: only the
  // transport's own timeouts apply.
  std::optional<std::chrono::milliseconds> timeout;
  // Requesting stop from another thread ends the call with CancelledError within 100 ms.
  std::stop_token stopToken;
  HttpMethod method = HttpMethod::Post;  // Get: `body` is not sent
};

// What the transport knows of the reply an event or body belongs to.
struct HttpReplyInfo {
  int status = 0;
  std::string requestId;  // x-request-id or request-id, "" when absent
};

// Reads one call's reply for a protocol. The transport calls reset() before every attempt, then
// either onEvent() for each event of a 2xx event stream and onStreamEnd() when it closed, or
// onBody() once for any other 2xx body. Non-2xx replies never reach the sink: they become
// HttpError. Any of these may throw a parley error (ProtocolError for a malformed reply,
// HttpError for an error the reply carries); the call then ends with it.
class HttpReplySink {
 public:
  virtual ~HttpReplySink() = default;

  // A new attempt starts: forget anything an earlier one read.
  virtual void reset() = 0;
  // One event of the stream. Return false to stop the call: send() then throws CancelledError.
  virtual bool onEvent(const SseEvent& event, const HttpReplyInfo& reply) = 0;
  // The stream ended without a transport error. Throw ProtocolError if it was cut short.
  virtual void onStreamEnd(const HttpReplyInfo& reply) = 0;
  // The events read so far are a whole reply: a connection that breaks after them loses nothing.
  virtual bool streamComplete() const noexcept = 0;
  // Something has reached the caller (a chunk handler): the call can no longer be retried.
  virtual bool delivered() const noexcept = 0;
  // A whole 2xx body that is not an event stream (never empty).
  virtual void onBody(std::string_view body, const HttpReplyInfo& reply) = 0;
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;

  // Sends `request` until it succeeds, fails for good or runs out of retries or time. Throws
  // HttpError (non-2xx, with the API's error fields), ConnectionError, TimeoutError,
  // CancelledError, ProtocolError (a reply over a size cap, an empty body), or what the sink threw.
  virtual void send(const HttpRequest& request, HttpReplySink& sink) = 0;
};

struct HttpTransportOptions {
  std::chrono::milliseconds connectTimeout{10'000};
  std::chrono::milliseconds requestTimeout{600'000};   // whole request, non-streaming calls
  std::chrono::milliseconds idleTimeout{120'000};      // longest silence inside a stream
  std::chrono::milliseconds streamTimeout{1'800'000};  // a whole stream, however lively
  int maxRetries = 2;
  size_t maxEventBytes = size_t{8} << 20;      // one stream event; larger: ProtocolError
  size_t maxResponseBytes = size_t{64} << 20;  // a whole body or stream; larger: ProtocolError

  // Seams for tests. `now` is the wall clock used to read Retry-After dates. `sleep` waits
  // between retries and must return early (without throwing) once the stop token is stopped.
  // Empty: the real clock; a sleep that wakes on cancellation.
  std::function<std::chrono::system_clock::time_point()> now;
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;
};

// The libcurl transport. Throws ValidationError for an unusable option (a timeout <= 0, a
// negative maxRetries, a cap of 0).
std::shared_ptr<HttpTransport> makeCurlTransport(HttpTransportOptions options = {});

}  // namespace parley
