// The error model: every error's code (kind, HTTP status, retryable), and errors as JSON and
// back as the same class (errorToJson / errorFromJson).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "parley/errors.hpp"

namespace parley {
namespace {

using json = nlohmann::json;

// Rethrows `error` and returns what was caught, as the caller of rethrowFromJson sees it.
template <typename E>
E caught(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const E& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "caught " << typeid(e).name() << ": " << e.what();
  }
  throw std::logic_error("unreachable");
}

HttpError httpError(int status, std::string body = "") {
  HttpError::Details details;
  details.status = status;
  details.body = std::move(body);
  return HttpError(std::move(details));
}

TEST(ErrorCode, EachClassHasItsKindAndRetryability) {
  EXPECT_EQ(Error("x").code(), (ErrorCode{ErrorKind::Error, 0, false}));
  EXPECT_EQ(ValidationError("f", "r").code(), (ErrorCode{ErrorKind::Validation, 0, false}));
  EXPECT_EQ(ConnectionError("x").code(), (ErrorCode{ErrorKind::Connection, 0, true}));
  EXPECT_EQ(TimeoutError("x").code(), (ErrorCode{ErrorKind::Timeout, 0, true}));
  EXPECT_EQ(CancelledError("x").code(), (ErrorCode{ErrorKind::Cancelled, 0, false}));
  EXPECT_EQ(ProtocolError("x").code(), (ErrorCode{ErrorKind::Protocol, 0, false}));
  EXPECT_EQ(StoreError("x").code(), (ErrorCode{ErrorKind::Store, 0, false}));
  EXPECT_EQ(StoreConflict("x").code(), (ErrorCode{ErrorKind::StoreConflict, 0, false}));
  EXPECT_EQ(httpError(429).code(), (ErrorCode{ErrorKind::Http, 429, true}));
  EXPECT_EQ(httpError(503).code(), (ErrorCode{ErrorKind::Http, 503, true}));
  EXPECT_EQ(httpError(400).code(), (ErrorCode{ErrorKind::Http, 400, false}));
  EXPECT_EQ(httpError(401).retryable(), false);
}

TEST(ErrorCode, KindNamesRoundTrip) {
  for (ErrorKind kind :
       {ErrorKind::Error, ErrorKind::Validation, ErrorKind::Http, ErrorKind::Connection,
        ErrorKind::Timeout, ErrorKind::Cancelled, ErrorKind::Protocol, ErrorKind::Store,
        ErrorKind::StoreConflict, ErrorKind::LeaseLost, ErrorKind::BudgetExceeded,
        ErrorKind::StructuredOutput, ErrorKind::Refusal}) {
    EXPECT_EQ(errorKindFromString(toString(kind)), kind) << toString(kind);
  }
  EXPECT_EQ(errorKindFromString("teapot"), std::nullopt);
}

TEST(ErrorJson, HttpErrorKeepsStatusBodyAndApiFields) {
  HttpError::Details details;
  details.status = 429;
  details.body = R"({"error":{"message":"slow down","type":"rate_limit"}})";
  details.apiMessage = "slow down";
  details.apiType = "rate_limit";
  details.apiCode = "rpm";
  details.requestId = "req-7";
  const HttpError original(details);
  const json document = errorToJson(original);
  EXPECT_EQ(document.at("kind"), "http");
  EXPECT_EQ(document.at("status"), 429);
  EXPECT_EQ(document.at("retryable"), true);
  EXPECT_EQ(document.at("message"), original.what());
  // Through text, as an event or a service response carries it.
  HttpError back = caught<HttpError>(errorFromJson(json::parse(document.dump())));
  EXPECT_EQ(back.status(), 429);
  EXPECT_EQ(back.body(), original.body());
  EXPECT_EQ(back.apiMessage(), "slow down");
  EXPECT_EQ(back.apiType(), "rate_limit");
  EXPECT_EQ(back.apiCode(), "rpm");
  EXPECT_EQ(back.requestId(), "req-7");
  EXPECT_STREQ(back.what(), original.what());
  EXPECT_TRUE(back.retryable());
}

TEST(ErrorJson, RefusalErrorKeepsItsExplanation) {
  const RefusalError original("blocked under the usage policy", "I can");
  const json document = json::parse(errorToJson(original).dump());
  EXPECT_EQ(document.at("kind"), "refusal");
  RefusalError back = caught<RefusalError>(errorFromJson(document));
  EXPECT_EQ(back.explanation(), "blocked under the usage policy");
  EXPECT_EQ(back.partialText(), "I can");
  EXPECT_STREQ(back.what(), original.what());
  EXPECT_FALSE(back.retryable());
}

TEST(ErrorJson, ValidationErrorKeepsItsField) {
  const json document = errorToJson(ValidationError("requestData.prompt", "must not be empty"));
  EXPECT_EQ(document.at("field"), "requestData.prompt");
  EXPECT_EQ(document.at("reason"), "must not be empty");
  ValidationError back = caught<ValidationError>(errorFromJson(document));
  EXPECT_EQ(back.field(), "requestData.prompt");
  EXPECT_EQ(back.reason(), "must not be empty");
  EXPECT_STREQ(back.what(), "requestData.prompt: must not be empty");
}

TEST(ErrorJson, BudgetExceededKeepsItsBudgetLimitAndEstimate) {
  const BudgetExceeded original("maxCostPerRun", 0.5, 0.75, "maxCostPerRun would be exceeded");
  const json document = json::parse(errorToJson(original).dump());
  EXPECT_EQ(document.at("kind"), "budget_exceeded");
  BudgetExceeded back = caught<BudgetExceeded>(errorFromJson(document));
  EXPECT_EQ(back.budget(), "maxCostPerRun");
  EXPECT_DOUBLE_EQ(back.limitUsd(), 0.5);
  EXPECT_DOUBLE_EQ(back.estimateUsd(), 0.75);
  EXPECT_STREQ(back.what(), original.what());
  EXPECT_FALSE(back.retryable());
  // An unpriced model's estimate is infinite: null in JSON, infinite again when read.
  const json unpriced = errorToJson(BudgetExceeded(
      "maxCostPerThread", 1, std::numeric_limits<double>::infinity(), "model x has no price"));
  EXPECT_TRUE(unpriced.at("estimateUsd").is_null());
  EXPECT_TRUE(std::isinf(caught<BudgetExceeded>(errorFromJson(unpriced)).estimateUsd()));
}

TEST(ErrorJson, EveryKindComesBackAsItsOwnClass) {
  EXPECT_EQ(caught<TimeoutError>(errorFromJson(errorToJson(TimeoutError("late")))).what(),
            std::string("late"));
  EXPECT_EQ(caught<CancelledError>(errorFromJson(errorToJson(CancelledError("stop")))).kind(),
            ErrorKind::Cancelled);
  EXPECT_EQ(caught<ConnectionError>(errorFromJson(errorToJson(ConnectionError("reset")))).kind(),
            ErrorKind::Connection);
  EXPECT_EQ(caught<ProtocolError>(errorFromJson(errorToJson(ProtocolError("bad")))).kind(),
            ErrorKind::Protocol);
  EXPECT_EQ(caught<StoreConflict>(errorFromJson(errorToJson(StoreConflict("stale")))).kind(),
            ErrorKind::StoreConflict);
  EXPECT_EQ(caught<LeaseLost>(errorFromJson(errorToJson(LeaseLost("fenced")))).kind(),
            ErrorKind::LeaseLost);
  try {
    rethrowFromJson(errorToJson(StoreError("disk")));
  } catch (const StoreConflict&) {
    ADD_FAILURE() << "a StoreError came back as a StoreConflict";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Store);
  }
}

TEST(ErrorJson, ForeignExceptionsAreKindError) {
  const json document = errorToJson(std::runtime_error("boom"));
  EXPECT_EQ(document.at("kind"), "error");
  EXPECT_EQ(document.at("message"), "boom");
  EXPECT_EQ(errorToJson(std::make_exception_ptr(42)).at("message"), "unknown error");
  Error back = caught<Error>(errorFromJson(document));
  EXPECT_EQ(back.kind(), ErrorKind::Error);
  EXPECT_STREQ(back.what(), "boom");
}

TEST(ErrorJson, BadDocumentsGiveAClearErrorNeverAThrow) {
  ProtocolError notObject = caught<ProtocolError>(errorFromJson(json::array()));
  EXPECT_NE(std::string(notObject.what()).find("must be a JSON object"), std::string::npos);
  // An unknown kind (a newer peer) is a plain Error with its message.
  Error unknown = caught<Error>(errorFromJson({{"kind", "teapot"}, {"message", "short"}}));
  EXPECT_EQ(unknown.kind(), ErrorKind::Error);
  EXPECT_STREQ(unknown.what(), "short");
  // Wrong types are ignored, not trusted.
  HttpError http = caught<HttpError>(
      errorFromJson({{"kind", "http"}, {"status", "429"}, {"body", 5}, {"message", nullptr}}));
  EXPECT_EQ(http.status(), 0);
  EXPECT_EQ(http.body(), "");
  EXPECT_EQ(caught<HttpError>(errorFromJson({{"kind", "http"}, {"status", 1LL << 40}})).status(),
            0);
  EXPECT_STREQ(caught<Error>(errorFromJson(json::object())).what(), "unknown error");
}

TEST(ErrorJson, TextsAreCappedBothWays) {
  const std::string huge(kMaxErrorTextBytes + 100, 'x');
  const json written = errorToJson(httpError(500, huge));
  EXPECT_EQ(written.at("body").get<std::string>().size(), kMaxErrorTextBytes);
  HttpError read = caught<HttpError>(errorFromJson({{"kind", "http"}, {"body", huge}}));
  EXPECT_EQ(read.body().size(), kMaxErrorTextBytes);
  EXPECT_EQ(caught<Error>(errorFromJson({{"message", huge}})).what(),
            std::string(kMaxErrorTextBytes, 'x'));
  // A cut never splits a character, so the document still dumps as JSON.
  std::string accents(kMaxErrorTextBytes - 1, 'a');
  accents += "\xC3\xA9\xC3\xA9";  // "éé" across the cap
  const json cut = errorToJson(ProtocolError(accents));
  EXPECT_EQ(cut.at("message").get<std::string>().size(), kMaxErrorTextBytes - 1);
  EXPECT_NO_THROW(cut.dump());
}

}  // namespace
}  // namespace parley
