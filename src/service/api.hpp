// The plumbing every route of the service shares (docs/service.md, "Errors"): an error as an
// OpenAI-style error object with its HTTP status, JSON bodies read with a clear refusal, ids
// checked before they reach the store, and the wrapper that turns what a handler throws into an
// answer. Internal to src/service/.
//
// Thread-safety: free functions; a Handler made by handle() may run on any thread.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "parley/json.hpp"
#include "parley/logger.hpp"
#include "parley/telemetry.hpp"

namespace parley::service {

// Thrown by a handler; answered as {"error": {"message", "type", "code"}} with `status`.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string type;
  std::string code;
};

nlohmann::json errorBody(const std::string& message, const std::string& type,
                         const std::string& code);
void sendJson(httplib::Response& res, int status, const nlohmann::json& body);
void sendError(httplib::Response& res, const ApiError& e);

ApiError notFound(const std::string& what);
ApiError badRequest(const std::string& code, const std::string& what);
ApiError conflict(const std::string& code, const std::string& what);

// A whole decimal integer, or nullopt (query parameters).
std::optional<int64_t> parseInt(const std::string& text);

// The request's body as a JSON object ({} when empty); 400 invalid_json otherwise.
nlohmann::json jsonBody(const httplib::Request& req);

// 400 invalid_id unless `id` is 1 to maxBytes of letters, digits and - _ . :
void checkId(const std::string& id, const char* what, size_t maxBytes);

// Runs `f(req, res)`: an ApiError is answered as is; a ValidationError as 400
// "invalid_<field>" (the field a typed reader names) or "invalid_request"; a StoreConflict as
// 409; anything else as 500 with the reason in the log only (a store's message may name the
// database's address).
template <typename F>
httplib::Server::Handler handle(const Logger& log, F f);

// A request's SERVER span, under its caller's W3C traceparent when it sends one
// (docs/telemetry.md); the route's work (a submitted run) sees it as the current context.
class RequestSpan {
 public:
  explicit RequestSpan(const httplib::Request& req);
  // The response's status on the span (status ERROR for a 5xx).
  void finish(const httplib::Response& res);

 private:
  ContextScope caller_;
  Span span_;
};

// The non-template part of handle(): answers the exception being handled.
void answerException(const Logger& log, const httplib::Request& req, httplib::Response& res);

template <typename F>
httplib::Server::Handler handle(const Logger& log, F f) {
  return [&log, f](const httplib::Request& req, httplib::Response& res) {
    RequestSpan span(req);
    try {
      f(req, res);
    } catch (...) {
      answerException(log, req, res);
    }
    span.finish(res);
  };
}

}  // namespace parley::service
