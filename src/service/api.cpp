#include "service/api.hpp"

#include <algorithm>
#include <charconv>

#include "parley/errors.hpp"
#include "parley/run_store.hpp"

namespace parley::service {

using json = nlohmann::json;

json errorBody(const std::string& message, const std::string& type, const std::string& code) {
  return {{"error", {{"message", message}, {"type", type}, {"code", code}}}};
}

void sendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void sendError(httplib::Response& res, const ApiError& e) {
  sendJson(res, e.status, errorBody(e.what(), e.type, e.code));
}

ApiError notFound(const std::string& what) {
  return ApiError(404, "not_found_error", "not_found", what);
}

ApiError badRequest(const std::string& code, const std::string& what) {
  return ApiError(400, "invalid_request_error", code, what);
}

ApiError conflict(const std::string& code, const std::string& what) {
  return ApiError(409, "conflict_error", code, what);
}

std::optional<int64_t> parseInt(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

json jsonBody(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  json value = parseJson(req.body, {}, /*allowExceptions=*/false);
  if (value.is_discarded() || !value.is_object()) {
    throw badRequest("invalid_json", "the request body must be a JSON object");
  }
  return value;
}

void checkId(const std::string& id, const char* what, size_t maxBytes) {
  if (id.empty() || id.size() > maxBytes) {
    throw badRequest("invalid_id",
                     std::string(what) + " id must be 1 to " + std::to_string(maxBytes) + " bytes");
  }
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) {
      throw badRequest("invalid_id",
                       std::string(what) + " id may hold only letters, digits and - _ . :");
    }
  }
}

namespace {

// "invalid_<field>" when the field is one word of a request body (max_iterations), else
// "invalid_request" (a field path of an inner check).
std::string validationCode(const std::string& field) {
  const bool word = !field.empty() && std::all_of(field.begin(), field.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || c == '_';
  });
  return word ? "invalid_" + field : "invalid_request";
}

}  // namespace

namespace {

TraceContext callerContext(const httplib::Request& req) {
  return TraceContext::parse(req.get_header_value("traceparent"),
                             req.get_header_value("tracestate"))
      .value_or(TraceContext{});
}

}  // namespace

RequestSpan::RequestSpan(const httplib::Request& req)
    : caller_(callerContext(req)), span_(req.method, "", SpanKind::Server) {
  if (!span_.recording()) return;
  span_.set("http.request.method", req.method);
  span_.set("url.path", req.path);
}

void RequestSpan::finish(const httplib::Response& res) {
  if (!span_.recording()) return;
  span_.set("http.response.status_code", res.status);
  if (res.status >= 500) span_.setError(std::to_string(res.status), "");
  span_.end();
}

void answerException(const Logger& log, const httplib::Request& req, httplib::Response& res) {
  try {
    throw;
  } catch (const ApiError& e) {
    sendError(res, e);
  } catch (const ValidationError& e) {
    sendError(res, badRequest(validationCode(e.field()), e.what()));
  } catch (const StoreConflict& e) {
    sendError(res, conflict("conflict", e.what()));
  } catch (const std::exception& e) {
    writeLog(log, "parley serve: " + req.method + " " + req.path + ": " + e.what());
    sendError(res, ApiError(500, "server_error", "internal_error",
                            "the request failed on the server; its log says why"));
  }
}

}  // namespace parley::service
