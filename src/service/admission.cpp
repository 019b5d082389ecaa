#include "service/admission.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "model/blanks.hpp"

namespace parley::service {

namespace {

std::string lower(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Same time whatever the first differing byte, so a token cannot be guessed byte by byte.
bool sameToken(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

bool changesState(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

Admission::Refusal refusal(int status, const char* type, const char* code, std::string message) {
  return {status, type, code, std::move(message), {}};
}

std::string retryAfter(std::chrono::milliseconds wait) {
  return std::to_string((wait.count() + 999) / 1000);
}

}  // namespace

bool isLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr addr{};
  return inet_pton(AF_INET, host.c_str(), &addr) == 1 && (ntohl(addr.s_addr) >> 24) == 127;
}

Admission::Admission(const ServiceOptions& options)
    : options_(options),
      perToken_(options.ratePerSecond, options.rateBurst),
      authFailures_(options.authFailuresPerSecond, options.authFailureBurst, {},
                    options.maxRateLimitedClients) {}

void Admission::bind(int port) {
  std::vector<std::string> names = options_.allowedHosts;
  if (names.empty()) {
    if (!options_.authTokens.empty() && !isLoopback(options_.host)) {
      allowAnyHost_ = true;  // reachable by any name; the token guards it
      bound_ = true;
      return;
    }
    names = {"localhost", "127.0.0.1", "[::1]"};
    names.push_back(options_.host.find(':') != std::string::npos ? "[" + options_.host + "]"
                                                                 : options_.host);
  }
  for (const auto& name : names) {
    if (name == "*") allowAnyHost_ = true;
    hostNames_.push_back(lower(name));
    // A name without a port also stands for itself with the service's port.
    const bool hasPort = name.back() != ']' && std::count(name.begin(), name.end(), ':') == 1;
    if (!hasPort) hostNames_.push_back(lower(name) + ":" + std::to_string(port));
  }
  bound_ = true;
}

bool Admission::hostAllowed(const std::string& host) const {
  if (!bound_) return false;
  if (allowAnyHost_) return true;
  return std::find(hostNames_.begin(), hostNames_.end(), lower(host)) != hostNames_.end();
}

// Cross-site requests: a state-changing request from a page of another origin is refused,
// whether or not a preflight would have been asked (a text/plain POST or a form asks none). Its
// Origin must be the service's own (the Host it was sent to) or corsOrigin.
bool Admission::originAllowed(const httplib::Request& req) const {
  if (!req.has_header("Origin")) return true;  // not a browser, or a same-origin GET
  const std::string origin = req.get_header_value("Origin");
  if (!options_.corsOrigin.empty() && origin == options_.corsOrigin) return true;
  for (const char* scheme : {"http://", "https://"}) {
    if (origin.rfind(scheme, 0) == 0) {
      return lower(origin.substr(std::strlen(scheme))) == lower(req.get_header_value("Host"));
    }
  }
  return false;  // "null" (a sandboxed page, a file) or anything else
}

std::optional<Admission::Refusal> Admission::check(const httplib::Request& req) {
  if (!hostAllowed(req.get_header_value("Host"))) {
    return refusal(403, "permission_error", "host_not_allowed",
                   "this service does not answer to the Host '" +
                       req.get_header_value("Host").substr(0, 256) +
                       "' (ServiceOptions::allowedHosts, --allowed-host)");
  }
  if (req.method == "OPTIONS") return std::nullopt;
  if (changesState(req.method)) {
    if (!originAllowed(req)) {
      return refusal(403, "permission_error", "origin_not_allowed",
                     "a state-changing request from the origin '" +
                         req.get_header_value("Origin").substr(0, 256) +
                         "' is refused (ServiceOptions::corsOrigin, --cors)");
    }
    std::string type = req.get_header_value("Content-Type");
    type = lower(std::string(detail::trimBlanks(type.substr(0, type.find(';')))));
    // A POST without a body and without a type (the LangGraph SDK's copy and cancel) cannot be
    // a form: a form always says its type.
    const bool bare = req.body.empty() && !req.has_header("Content-Type");
    if ((req.method == "POST" || req.method == "PUT" || req.method == "PATCH") &&
        type != "application/json" && type != "application/a2a+json" && !bare) {
      return refusal(415, "invalid_request_error", "unsupported_media_type",
                     "a " + req.method + " request must have Content-Type: application/json");
    }
  }
  // The A2A Agent Card is public: it is how a client learns that it needs a token.
  const bool open =
      req.path == "/" || req.path == "/healthz" || req.path == "/.well-known/agent-card.json";
  if (options_.authTokens.empty() || open) return std::nullopt;
  // Failed authentication is limited per client address: once it ran out, every authenticated
  // request of that address waits (a right token as much as a wrong one, or the answer would
  // tell a guess right).
  const std::string client = "addr:" + req.remote_addr;
  if (const auto wait = authFailures_.peek(client); wait.count() > 0) {
    auto refused = refusal(429, "rate_limit_error", "too_many_failed_authentications",
                           "too many failed authentications from this address; try again later");
    refused.headers.emplace_back("Retry-After", retryAfter(wait));
    return refused;
  }
  std::string given;
  const std::string header = req.get_header_value("Authorization");
  if (header.rfind("Bearer ", 0) == 0) {
    given = header.substr(7);
  } else if (req.has_header("X-Api-Key")) {
    given = req.get_header_value("X-Api-Key");  // the LangGraph SDK's header
  } else if (req.path.ends_with("/events")) {
    given = req.get_param_value("access_token");  // EventSource cannot send headers
  }
  size_t which = options_.authTokens.size();
  for (size_t i = 0; i < options_.authTokens.size(); ++i)
    if (sameToken(given, options_.authTokens[i])) which = i;
  if (which == options_.authTokens.size()) {
    authFailures_.take(client);
    auto refused = refusal(401, "authentication_error", "invalid_token",
                           given.empty() ? "this service wants Authorization: Bearer <token>"
                                         : "the bearer token is not one of this service's");
    refused.headers.emplace_back("WWW-Authenticate", "Bearer");
    return refused;
  }
  // Per token: without tokens the service is loopback-only, and one address may be a whole
  // machine's clients. /metrics is not counted.
  if (req.path == "/metrics") return std::nullopt;
  if (const auto wait = perToken_.take("token:" + std::to_string(which)); wait.count() > 0) {
    auto refused =
        refusal(429, "rate_limit_error", "rate_limited",
                "too many requests: " + std::to_string(options_.ratePerSecond) +
                    " per second allowed (burst " + std::to_string(options_.rateBurst) + ")");
    refused.headers.emplace_back("Retry-After", retryAfter(wait));
    return refused;
  }
  return std::nullopt;
}

}  // namespace parley::service
