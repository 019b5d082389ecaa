// Admission: the checks `parley serve` makes before any route (docs/service.md, "Security and
// caps" and "Cross-site requests and DNS rebinding"): the Host (DNS rebinding), the Origin and
// media type of state-changing requests (cross-site requests), the bearer token with the failed
// authentication limit per client address, and the request rate per token. Internal to
// src/service/.
//
// Thread-safety: check() may be called from any thread once bind() returned; bind() once.
#pragma once

#include <httplib.h>

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "service/rate_limiter.hpp"
#include "service/service.hpp"

namespace parley::service {

// localhost, ::1 or an address in 127.0.0.0/8.
bool isLoopback(const std::string& host);

class Admission {
 public:
  explicit Admission(const ServiceOptions& options);

  // The port is bound: the Host names are known. Until then every request is refused (someone
  // who guessed the port).
  void bind(int port);

  // Why a request is refused: its status, error type, code and message, and headers to send.
  struct Refusal {
    int status = 0;
    std::string type;
    std::string code;
    std::string message;
    std::vector<std::pair<std::string, std::string>> headers;
  };
  // nullopt: admitted. Counts the request against its token's rate and, when its token is
  // wrong, against its address's failed authentications.
  std::optional<Refusal> check(const httplib::Request& req);

 private:
  bool hostAllowed(const std::string& host) const;
  bool originAllowed(const httplib::Request& req) const;

  const ServiceOptions& options_;
  RateLimiter perToken_;
  RateLimiter authFailures_;  // per client address
  // The Host names allowed (lower case; a name without a port also with the bound port), or
  // any (allowAnyHost_).
  std::vector<std::string> hostNames_;
  bool allowAnyHost_ = false;
  std::atomic<bool> bound_{false};
};

}  // namespace parley::service
