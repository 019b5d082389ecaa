#include "parley/errors.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace parley {

namespace {

using json = nlohmann::json;

constexpr std::pair<ErrorKind, const char*> kKindNames[] = {
    {ErrorKind::Error, "error"},
    {ErrorKind::Validation, "validation"},
    {ErrorKind::Http, "http"},
    {ErrorKind::Connection, "connection"},
    {ErrorKind::Timeout, "timeout"},
    {ErrorKind::Cancelled, "cancelled"},
    {ErrorKind::Protocol, "protocol"},
    {ErrorKind::Store, "store"},
    {ErrorKind::StoreConflict, "store_conflict"},
    {ErrorKind::LeaseLost, "lease_lost"},
    {ErrorKind::BudgetExceeded, "budget_exceeded"},
    {ErrorKind::StructuredOutput, "structured_output"},
    {ErrorKind::Refusal, "refusal"},
};

std::string describe(const HttpError::Details& d) {
  // An error object in a 2xx body or inside a stream is not an HTTP status; say what it is.
  std::string text;
  if (d.status == 0) {
    text = "the server sent an error instead of a reply";
  } else if (d.status >= 200 && d.status < 300) {
    text = "the server sent an error inside its " + std::to_string(d.status) + " reply";
  } else {
    text = "HTTP " + std::to_string(d.status);
  }
  if (!d.apiMessage.empty()) {
    text += ": " + d.apiMessage;
  } else if (!d.body.empty()) {
    constexpr size_t kMaxBodyInMessage = 300;
    text += ": " + d.body.substr(0, kMaxBodyInMessage);
  }
  if (!d.apiType.empty()) text += " (type " + d.apiType + ")";
  if (!d.apiCode.empty()) text += " (code " + d.apiCode + ")";
  if (!d.requestId.empty()) text += " [request " + d.requestId + "]";
  return text;
}

// At most kMaxErrorTextBytes, cut before a UTF-8 continuation byte so a cut never splits a
// character.
std::string capped(std::string_view text) {
  if (text.size() <= kMaxErrorTextBytes) return std::string(text);
  size_t end = kMaxErrorTextBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    --end;
  return std::string(text.substr(0, end));
}

std::string stringField(const json& document, const char* key) {
  auto it = document.find(key);
  if (it == document.end() || !it->is_string()) return {};
  return capped(it->get_ref<const std::string&>());
}

}  // namespace

const char* toString(ErrorKind kind) noexcept {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "error";
}

std::optional<ErrorKind> errorKindFromString(std::string_view name) noexcept {
  for (const auto& [k, known] : kKindNames)
    if (name == known) return k;
  return std::nullopt;
}

ValidationError::ValidationError(std::string field, const std::string& reason)
    : Error(field + ": " + reason, {ErrorKind::Validation, 0, false}),
      field_(std::move(field)),
      reason_(reason) {}

bool HttpError::retryableStatus(int status) noexcept {
  return status == 408 || status == 409 || status == 429 || status >= 500;
}

BudgetExceeded::BudgetExceeded(std::string budget, double limitUsd, double estimateUsd,
                               const std::string& message)
    : Error(message, {ErrorKind::BudgetExceeded, 0, false}),
      budget_(std::move(budget)),
      limitUsd_(limitUsd),
      estimateUsd_(estimateUsd) {}

namespace {
std::string describe(const StructuredOutputError::Details& d) {
  std::string text = "structured output: ";
  text += d.messages.empty() ? d.path + ": does not match the schema" : d.messages.front();
  if (d.messages.size() > 1) text += " (and " + std::to_string(d.messages.size() - 1) + " more)";
  if (d.attempts > 0) {
    text += " after " + std::to_string(d.attempts) + (d.attempts == 1 ? " attempt" : " attempts");
    if (!d.rung.empty()) text += " (" + d.rung + ")";
  }
  return text;
}
}  // namespace

RefusalError::RefusalError(std::string explanation, std::string partialText)
    : Error("the model refused: " + explanation, {ErrorKind::Refusal, 0, false}),
      explanation_(std::move(explanation)),
      partialText_(std::move(partialText)) {}

StructuredOutputError::StructuredOutputError(Details details)
    : Error(describe(details), {ErrorKind::StructuredOutput, 0, false}),
      details_(std::move(details)) {}

HttpError::HttpError(Details details)
    : Error(describe(details), {ErrorKind::Http, details.status, retryableStatus(details.status)}),
      details_(std::move(details)) {}

json errorToJson(const std::exception& error) {
  const auto* parley = dynamic_cast<const Error*>(&error);
  const ErrorCode code = parley ? parley->code() : ErrorCode{};
  json out = {{"kind", toString(code.kind)},
              {"message", capped(error.what())},
              {"retryable", code.retryable}};
  if (const auto* e = dynamic_cast<const ValidationError*>(&error)) {
    out["field"] = e->field();
    out["reason"] = capped(e->reason());
  } else if (const auto* e = dynamic_cast<const HttpError*>(&error)) {
    const HttpError::Details& d = e->details();
    out["status"] = d.status;
    out["body"] = capped(d.body);
    out["apiMessage"] = capped(d.apiMessage);
    out["apiType"] = capped(d.apiType);
    out["apiCode"] = capped(d.apiCode);
    out["requestId"] = capped(d.requestId);
  } else if (const auto* e = dynamic_cast<const BudgetExceeded*>(&error)) {
    out["budget"] = e->budget();
    // JSON has no infinity: an unpriced model's estimate is written as null.
    out["limitUsd"] = e->limitUsd();
    out["estimateUsd"] = std::isfinite(e->estimateUsd()) ? json(e->estimateUsd()) : json(nullptr);
  } else if (const auto* e = dynamic_cast<const RefusalError*>(&error)) {
    out["explanation"] = capped(e->explanation());
    out["partialText"] = capped(e->partialText());
  } else if (const auto* e = dynamic_cast<const StructuredOutputError*>(&error)) {
    const StructuredOutputError::Details& d = e->details();
    out["path"] = capped(d.path);
    json messages = json::array();
    for (const std::string& m : d.messages)
      messages.push_back(capped(m));
    out["messages"] = std::move(messages);
    out["rung"] = d.rung;
    out["attempts"] = d.attempts;
    out["reply"] = capped(d.reply);
  }
  return out;
}

json errorToJson(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return errorToJson(e);
  } catch (...) {
    return {
        {"kind", toString(ErrorKind::Error)}, {"message", "unknown error"}, {"retryable", false}};
  }
}

std::exception_ptr errorFromJson(const json& document) {
  try {
    if (!document.is_object()) {
      return std::make_exception_ptr(ProtocolError("an error document must be a JSON object, got " +
                                                   std::string(document.type_name())));
    }
    std::string message = stringField(document, "message");
    if (message.empty()) message = "unknown error";
    const std::optional<ErrorKind> kind = errorKindFromString(stringField(document, "kind"));
    switch (kind.value_or(ErrorKind::Error)) {
      case ErrorKind::Validation: {
        std::string reason = stringField(document, "reason");
        return std::make_exception_ptr(
            ValidationError(stringField(document, "field"), reason.empty() ? message : reason));
      }
      case ErrorKind::Http: {
        HttpError::Details d;
        if (auto it = document.find("status"); it != document.end() && it->is_number_integer()) {
          const auto status = it->get<int64_t>();
          if (status >= 0 && status <= 999) d.status = static_cast<int>(status);
        }
        d.body = stringField(document, "body");
        d.apiMessage = stringField(document, "apiMessage");
        d.apiType = stringField(document, "apiType");
        d.apiCode = stringField(document, "apiCode");
        d.requestId = stringField(document, "requestId");
        return std::make_exception_ptr(HttpError(std::move(d)));
      }
      case ErrorKind::Connection:
        return std::make_exception_ptr(ConnectionError(message));
      case ErrorKind::Timeout:
        return std::make_exception_ptr(TimeoutError(message));
      case ErrorKind::Cancelled:
        return std::make_exception_ptr(CancelledError(message));
      case ErrorKind::Protocol:
        return std::make_exception_ptr(ProtocolError(message));
      case ErrorKind::Store:
        return std::make_exception_ptr(StoreError(message));
      case ErrorKind::StoreConflict:
        return std::make_exception_ptr(StoreConflict(message));
      case ErrorKind::LeaseLost:
        return std::make_exception_ptr(LeaseLost(message));
      case ErrorKind::BudgetExceeded: {
        auto number = [&](const char* key) {
          auto it = document.find(key);
          return it != document.end() && it->is_number() ? it->get<double>()
                                                         : std::numeric_limits<double>::infinity();
        };
        return std::make_exception_ptr(BudgetExceeded(
            stringField(document, "budget"), number("limitUsd"), number("estimateUsd"), message));
      }
      case ErrorKind::StructuredOutput: {
        StructuredOutputError::Details d;
        d.path = stringField(document, "path");
        if (auto it = document.find("messages"); it != document.end() && it->is_array()) {
          for (const json& m : *it) {
            if (m.is_string() && d.messages.size() < 64)
              d.messages.push_back(capped(m.get<std::string>()));
          }
        }
        d.rung = stringField(document, "rung");
        if (auto it = document.find("attempts"); it != document.end() && it->is_number_integer()) {
          d.attempts = static_cast<int>(std::clamp<int64_t>(it->get<int64_t>(), 0, 1000));
        }
        d.reply = stringField(document, "reply");
        return std::make_exception_ptr(StructuredOutputError(std::move(d)));
      }
      case ErrorKind::Refusal: {
        std::string explanation = stringField(document, "explanation");
        return std::make_exception_ptr(RefusalError(explanation.empty() ? message : explanation,
                                                    stringField(document, "partialText")));
      }
      case ErrorKind::Error:
        break;
    }
    return std::make_exception_ptr(Error(message));
  } catch (...) {
    return std::current_exception();  // std::bad_alloc
  }
}

void rethrowFromJson(const json& document) {
  std::rethrow_exception(errorFromJson(document));
}

}  // namespace parley
