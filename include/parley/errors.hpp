// The errors parley's core throws.
//
// Every error derives from parley::Error, itself a std::runtime_error, so `catch (const
// parley::Error&)` catches everything the library raises on purpose. The facade (ai.hpp) never
// throws: it catches these and reports them through lastError().
//
// Thread-safety: error objects are immutable values; copy them freely.
#pragma once

#include <stdexcept>
#include <string>

namespace parley {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
  using Error::Error;
};

// A deadline passed: connect, whole request, idle gap in a stream, or a per-call timeout.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The caller cancelled the operation (a stop token, Ctrl-C, or onChunk returning false).
class CancelledError : public Error {
 public:
  using Error::Error;
};

// The server's bytes do not make a valid reply: malformed JSON, a stream that ends early,
// an event or a response larger than the configured limit.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A persistence failure. A call that throws it has changed nothing in the store.
class StoreError : public Error {
 public:
  using Error::Error;
};

// Another writer changed the thread since it was loaded (optimistic version check).
class StoreConflict : public StoreError {
 public:
  using StoreError::StoreError;
};

// A fenced write named a lease that is no longer the thread's: it expired and another worker
// took the thread over (its fencing token is higher), or the run was cancelled or handed back.
// Nothing was written. The worker must stop working on the run (run_store.hpp).
class LeaseLost : public StoreError {
 public:
  using StoreError::StoreError;
};

// A model call could cost more than a budget allows (cost.hpp's CostBudget): nothing was sent.
// what() names the budget, its limit and the estimate.
class BudgetExceeded : public Error {
 public:
  BudgetExceeded(std::string budget, double limitUsd, double estimateUsd,
                 const std::string& message);
  const std::string& budget() const noexcept { return budget_; }  // "maxCostPerRun", ...
  double limitUsd() const noexcept { return limitUsd_; }
  double estimateUsd() const noexcept { return estimateUsd_; }  // spent + the call's worst case

 private:
  std::string budget_;
  double limitUsd_;
  double estimateUsd_;
};

}  // namespace parley
