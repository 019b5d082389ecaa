// The errors parley's core throws.
//
// Every error derives from parley::Error, itself a std::runtime_error, so `catch (const
// parley::Error&)` catches everything the library raises on purpose. The facade (ai.hpp) never
// throws: it catches these and reports them through lastError().
//
// Every error carries an ErrorCode (its kind, the HTTP status, whether retrying may help), and
// errorToJson() / errorFromJson() carry an error across a boundary as data and back as the same
// class: an HttpError 429 that travels through the executor's events, the event log or a
// service's response is an HttpError 429 with its body again on the other side
// (docs/architecture.md, "Errors").
//
// Thread-safety: error objects are immutable values; copy them freely.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace parley {

// One kind per class of the hierarchy below; written in JSON as the name toString() gives.
enum class ErrorKind {
  Error,             // "error": any other failure (also a std::exception that is not a parley one)
  Validation,        // "validation"
  Http,              // "http"
  Connection,        // "connection"
  Timeout,           // "timeout"
  Cancelled,         // "cancelled"
  Protocol,          // "protocol"
  Store,             // "store"
  StoreConflict,     // "store_conflict"
  LeaseLost,         // "lease_lost"
  BudgetExceeded,    // "budget_exceeded"
  StructuredOutput,  // "structured_output"
  Refusal,           // "refusal"
};

const char* toString(ErrorKind kind) noexcept;
// nullopt for a name that is not one of toString()'s.
std::optional<ErrorKind> errorKindFromString(std::string_view name) noexcept;

struct ErrorCode {
  ErrorKind kind = ErrorKind::Error;
  int httpStatus = 0;  // an HttpError's status; 0 for every other kind
  // The same operation, tried again unchanged, may succeed: a connection failure, a timeout,
  // HTTP 408, 409, 429 and >= 500 (the statuses the client retries itself).
  bool retryable = false;

  bool operator==(const ErrorCode&) const = default;
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : Error(what, ErrorCode{}) {}
  const ErrorCode& code() const noexcept { return code_; }
  ErrorKind kind() const noexcept { return code_.kind; }
  bool retryable() const noexcept { return code_.retryable; }

 protected:
  Error(const std::string& what, ErrorCode code) : std::runtime_error(what), code_(code) {}

 private:
  ErrorCode code_;
};

// Input that breaks a documented rule. what() reads "<field>: <reason>", e.g.
// "message.tool_call_id: a tool message needs the id of the call it answers".
class ValidationError : public Error {
 public:
  ValidationError(std::string field, const std::string& reason);
  const std::string& field() const noexcept { return field_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string field_;
  std::string reason_;
};

// The server answered with a non-2xx status (or sent an error object inside a stream).
// apiMessage/apiType/apiCode come from the OpenAI error body {"error": {...}} when present.
class HttpError : public Error {
 public:
  struct Details {
    int status = 0;
    std::string body;
    std::string apiMessage;
    std::string apiType;
    std::string apiCode;
    std::string requestId;  // the x-request-id response header
  };
  explicit HttpError(Details details);
  // Whether a response with `status` is worth retrying: 408, 409, 429 and >= 500.
  static bool retryableStatus(int status) noexcept;
  int status() const noexcept { return details_.status; }
  const std::string& body() const noexcept { return details_.body; }
  const std::string& apiMessage() const noexcept { return details_.apiMessage; }
  const std::string& apiType() const noexcept { return details_.apiType; }
  const std::string& apiCode() const noexcept { return details_.apiCode; }
  const std::string& requestId() const noexcept { return details_.requestId; }
  const Details& details() const noexcept { return details_; }

 private:
  Details details_;
};

// The connection could not be made or broke (DNS, refused, reset, TLS).
class ConnectionError : public Error {
 public:
  explicit ConnectionError(const std::string& what)
      : Error(what, {ErrorKind::Connection, 0, true}) {}
};

// A deadline passed: connect, whole request, idle gap in a stream, or a per-call timeout.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what, {ErrorKind::Timeout, 0, true}) {}
};

// The caller cancelled the operation (a stop token, Ctrl-C, or onChunk returning false).
class CancelledError : public Error {
 public:
  explicit CancelledError(const std::string& what)
      : Error(what, {ErrorKind::Cancelled, 0, false}) {}
};

// The server's bytes do not make a valid reply: malformed JSON, a stream that ends early,
// an event or a response larger than the configured limit.
class ProtocolError : public Error {
 public:
  explicit ProtocolError(const std::string& what) : Error(what, {ErrorKind::Protocol, 0, false}) {}
};

// A persistence failure. A call that throws it has changed nothing in the store.
class StoreError : public Error {
 public:
  explicit StoreError(const std::string& what) : Error(what, {ErrorKind::Store, 0, false}) {}

 protected:
  StoreError(const std::string& what, ErrorCode code) : Error(what, code) {}
};

// Another writer changed the thread since it was loaded (optimistic version check).
// Retrying the same write cannot succeed: load the thread again first.
class StoreConflict : public StoreError {
 public:
  explicit StoreConflict(const std::string& what)
      : StoreError(what, {ErrorKind::StoreConflict, 0, false}) {}
};

// A fenced write named a lease that is no longer the thread's: it expired and another worker
// took the thread over (its fencing token is higher), or the run was cancelled or handed back.
// Nothing was written. The worker must stop working on the run (run_store.hpp).
class LeaseLost : public StoreError {
 public:
  explicit LeaseLost(const std::string& what)
      : StoreError(what, {ErrorKind::LeaseLost, 0, false}) {}
};

// A model call could cost more than a budget allows (cost.hpp's CostBudget): nothing was sent.
// what() names the budget, its limit and the estimate.
class BudgetExceeded : public Error {
 public:
  BudgetExceeded(std::string budget, double limitUsd, double estimateUsd,
                 const std::string& message);
  const std::string& budget() const noexcept { return budget_; }  // "maxCostPerRun", ...
  double limitUsd() const noexcept { return limitUsd_; }
  // Spent + the call's worst case; infinity when the model has no price.
  double estimateUsd() const noexcept { return estimateUsd_; }

 private:
  std::string budget_;
  double limitUsd_;
  double estimateUsd_;
};

// A structured answer (ConversationManager::runStructured, runAs<T>) could not be had: the
// replies did not parse as JSON or did not match the schema within the repairs allowed, or the
// validated JSON could not be read as the type asked for. what() names the first failing field.
class StructuredOutputError : public Error {
 public:
  struct Details {
    // The first failing value as a path into the answer: "age", "tags[1]", "address.city";
    // "answer" for the whole value (not JSON, not an object).
    std::string path;
    std::vector<std::string> messages;  // every failure, "<path>: <why>"
    std::string rung;   // the last attempt's rung: "json_schema", "json_object" or "tool"
    int attempts = 0;   // model calls made (the first answer and its repairs)
    std::string reply;  // the last reply's text, as received
  };
  explicit StructuredOutputError(Details details);
  const std::string& path() const noexcept { return details_.path; }
  const std::vector<std::string>& messages() const noexcept { return details_.messages; }
  const Details& details() const noexcept { return details_; }

 private:
  Details details_;
};

// The model declined to answer (Anthropic's stop_reason "refusal", an OpenAI `refusal` in place
// of the answer): a distinct outcome, not an empty reply. what() and explanation() carry the
// provider's explanation; nothing was added to the conversation. Retrying the same request gives
// the same answer.
class RefusalError : public Error {
 public:
  explicit RefusalError(std::string explanation, std::string partialText = {});
  const std::string& explanation() const noexcept { return explanation_; }
  // Text the model wrote before it stopped, if any (kept out of the conversation).
  const std::string& partialText() const noexcept { return partialText_; }

 private:
  std::string explanation_;
  std::string partialText_;
};

// --- errors as data --------------------------------------------------------------------------

// Texts an error document carries (message, an HTTP body) are cut at this many bytes, both
// when written and when read: an error read from outside cannot grow without bound.
inline constexpr std::size_t kMaxErrorTextBytes = std::size_t{64} << 10;

// The error as a JSON object:
//   {"kind": "http", "message": what(), "retryable": true, "status": 429,
//    "body": "...", "apiMessage": "...", "apiType": "...", "apiCode": "...", "requestId": "..."}
// "field" and "reason" for a ValidationError; "status" and the API's fields for an HttpError;
// "budget", "limitUsd" and "estimateUsd" (null for an unpriced model) for a BudgetExceeded;
// "path", "messages", "rung", "attempts" and "reply" for a StructuredOutputError; "explanation"
// and "partialText" for a RefusalError. A
// std::exception that is not a parley::Error is kind "error".
nlohmann::json errorToJson(const std::exception& error);
// The same for a caught exception of any type (anything not a std::exception: "unknown error").
nlohmann::json errorToJson(const std::exception_ptr& error);
// The exception errorToJson() described, as its own class (HttpError with its status and body,
// ValidationError with its field, ...). An unknown kind gives a plain Error with the message;
// a document that is not a JSON object gives a ProtocolError saying so. Never throws.
std::exception_ptr errorFromJson(const nlohmann::json& document);
// std::rethrow_exception(errorFromJson(document)).
[[noreturn]] void rethrowFromJson(const nlohmann::json& document);

}  // namespace parley
