#include "parley/errors.hpp"

#include <utility>

namespace parley {

ValidationError::ValidationError(std::string field, const std::string& reason)
    : Error(field + ": " + reason), field_(std::move(field)), reason_(reason) {}

BudgetExceeded::BudgetExceeded(std::string budget, double limitUsd, double estimateUsd,
                               const std::string& message)
    : Error(message), budget_(std::move(budget)), limitUsd_(limitUsd), estimateUsd_(estimateUsd) {}

namespace {

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

}  // namespace

HttpError::HttpError(Details details) : Error(describe(details)), details_(std::move(details)) {}

}  // namespace parley
