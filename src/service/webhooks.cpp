#include "service/webhooks.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <random>

#include "model/sha256.hpp"
#include "parley/errors.hpp"
#include "parley/version.hpp"

namespace parley::service {

namespace {

using WebhookClock = std::chrono::steady_clock;

std::string webhookHex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

// A URL's parts, as libcurl's parser reads them ("" for a part it has not).
struct WebhookUrl {
  std::string scheme, host, port, user, password;
};

std::optional<WebhookUrl> parseWebhookUrl(const std::string& url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> handle(curl_url(), &curl_url_cleanup);
  if (!handle || curl_url_set(handle.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    return std::nullopt;
  }
  auto part = [&](CURLUPart which, unsigned flags = 0) -> std::string {
    char* text = nullptr;
    if (curl_url_get(handle.get(), which, &text, flags) != CURLUE_OK || !text) return "";
    std::string out(text);
    curl_free(text);
    return out;
  };
  WebhookUrl out;
  out.scheme = part(CURLUPART_SCHEME);
  out.host = part(CURLUPART_HOST);
  out.port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  out.user = part(CURLUPART_USER);
  out.password = part(CURLUPART_PASSWORD);
  return out;
}

// The host without the brackets of an IPv6 literal.
std::string bareHost(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

std::vector<std::string> resolveWebhookHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* a = found; a; a = a->ai_next) {
    std::array<char, INET6_ADDRSTRLEN> text{};
    const void* where =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        inet_ntop(a->ai_family, where, text.data(), text.size())) {
      std::string address(text.data());
      if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
    }
  }
  freeaddrinfo(found);
  return out;
}

AddressKind classifyIpv4(uint32_t a) {
  const auto in = [a](uint32_t net, int bits) {
    return bits == 0 || (a >> (32 - bits)) == (net >> (32 - bits));
  };
  if (in(0x7f000000, 8)) return AddressKind::Loopback;                   // 127/8
  if (in(0x0a000000, 8) || in(0xac100000, 12) || in(0xc0a80000, 16) ||   // RFC 1918
      in(0xa9fe0000, 16) ||                                              // link-local, metadata
      in(0x64400000, 10) ||                                              // shared (CGNAT)
      in(0x00000000, 8) ||                                               // "this network"
      in(0xc0000000, 24) || in(0xc0000200, 24) || in(0xc6336400, 24) ||  // IETF, TEST-NETs
      in(0xcb007100, 24) || in(0xc6120000, 15) ||                        // TEST-NET-3, benchmark
      in(0xe0000000, 4) || in(0xf0000000, 4)) {                          // multicast, reserved
    return AddressKind::Private;
  }
  return AddressKind::Public;
}

bool webhookHeaderNameOk(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && !std::strchr("!#$%&'*+-.^_`|~", c)) return false;
  }
  return true;
}

bool webhookReservedHeader(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name == "host" || name == "content-type" || name == "content-length" ||
         name == "transfer-encoding" || name == "expect" || name == "connection" ||
         name.rfind("x-parley-", 0) == 0;
}

}  // namespace

AddressKind classifyAddress(const std::string& address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return classifyIpv4(ntohl(v4.s_addr));
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) != 1) return AddressKind::Invalid;
  const unsigned char* b = v6.s6_addr;
  static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr unsigned char kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kLoopback, 16) == 0) return AddressKind::Loopback;
  // IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::a.b.c.d): the IPv4 address decides.
  if (std::memcmp(b, kMapped, 12) == 0 || std::memcmp(b, kNat64, 12) == 0) {
    return classifyIpv4(uint32_t{b[12]} << 24 | uint32_t{b[13]} << 16 | uint32_t{b[14]} << 8 |
                        b[15]);
  }
  const bool unspecified = std::all_of(b, b + 16, [](unsigned char c) { return c == 0; });
  if (unspecified || (b[0] & 0xfe) == 0xfc ||                            // unique local fc00::/7
      (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) ||                         // link-local fe80::/10
      (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) ||                         // site-local fec0::/10
      b[0] == 0xff ||                                                    // multicast
      (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) ||  // documentation
      std::all_of(b, b + 12, [](unsigned char c) { return c == 0; })) {  // IPv4-compatible
    return AddressKind::Private;
  }
  return AddressKind::Public;
}

std::string webhookSignature(std::string_view secret, std::string_view body) {
  return "sha256=" + webhookHex(detail::hmacSha256(secret, body));
}

WebhookSender::WebhookSender(WebhookOptions options) : options_(std::move(options)) {
  auto positive = [](std::chrono::milliseconds value) { return value.count() > 0; };
  if (options_.maxConcurrent == 0 || options_.maxConcurrent > 64) {
    throw ValidationError("webhooks.maxConcurrent", "must be 1 to 64");
  }
  if (options_.maxQueue == 0) throw ValidationError("webhooks.maxQueue", "must be at least 1");
  if (options_.maxBodyBytes == 0 || options_.maxUrlBytes == 0) {
    throw ValidationError("webhooks.maxBodyBytes", "caps must be at least 1");
  }
  if (!positive(options_.timeout) || !positive(options_.retryDelay) ||
      !positive(options_.maxRetryDelay)) {
    throw ValidationError("webhooks.timeout", "timeouts and delays must be positive");
  }
  if (options_.maxRetries < 0 || options_.maxRetries > 20) {
    throw ValidationError("webhooks.maxRetries", "must be 0 to 20");
  }
}

WebhookSender::~WebhookSender() {
  stop();
}

void WebhookSender::checkUrl(const std::string& url) const {
  if (url.size() > options_.maxUrlBytes) {
    throw ValidationError("webhook",
                          "is longer than " + std::to_string(options_.maxUrlBytes) + " bytes");
  }
  for (unsigned char c : url) {
    if (c <= 0x20 || c == 0x7f) throw ValidationError("webhook", "holds a space or control byte");
  }
  const auto parts = parseWebhookUrl(url);
  if (!parts || parts->host.empty()) throw ValidationError("webhook", "is not an absolute URL");
  if (!parts->user.empty() || !parts->password.empty()) {
    throw ValidationError("webhook", "must not hold a user name or password (send a header)");
  }
  if (parts->scheme == "https") return;
  if (parts->scheme == "http" && options_.allowLoopback) return;  // loopback only: see post()
  throw ValidationError("webhook", options_.allowLoopback
                                       ? "must be https (or http to a loopback address)"
                                       : "must be https");
}

bool WebhookSender::send(WebhookDelivery delivery) {
  std::string problem;
  try {
    checkUrl(delivery.url);
  } catch (const ValidationError& e) {
    problem = e.what();
  }
  if (problem.empty() && delivery.body.size() > options_.maxBodyBytes) {
    problem = "its body is over " + std::to_string(options_.maxBodyBytes) + " bytes";
  }
  if (problem.empty() && delivery.headers.size() > options_.maxHeaders) {
    problem = "it has more than " + std::to_string(options_.maxHeaders) + " headers";
  }
  for (const auto& [name, value] : delivery.headers) {
    if (!problem.empty()) break;
    if (!webhookHeaderNameOk(name) || webhookReservedHeader(name) ||
        name.size() + value.size() > options_.maxHeaderBytes ||
        value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      problem = "header '" + name.substr(0, 64) + "' is not allowed";
    }
  }
  std::unique_lock lock(mutex_);
  if (problem.empty() && stopping_) problem = "the sender stopped";
  if (!problem.empty()) {
    ++stats_.refused;
    lock.unlock();
    writeLog(options_.log, "webhook: not sent: " + problem);
    return false;
  }
  if (queue_.size() >= options_.maxQueue) {
    ++stats_.dropped;
    lock.unlock();
    writeLog(options_.log, "webhook: " + std::to_string(options_.maxQueue) +
                               " deliveries wait already; one to " + delivery.url.substr(0, 128) +
                               " is dropped");
    return false;
  }
  if (threads_.empty()) {
    for (size_t i = 0; i < options_.maxConcurrent; ++i)
      threads_.emplace_back([this] { work(); });
  }
  static thread_local std::mt19937_64 random{std::random_device{}()};
  Pending pending{std::move(delivery), "", 0};
  const uint64_t salt = random();
  pending.id = webhookHex(std::string_view(reinterpret_cast<const char*>(&salt), sizeof salt)) +
               "-" + std::to_string(++nextId_);
  queue_.emplace(WebhookClock::now(), std::move(pending));
  wake_.notify_one();
  return true;
}

void WebhookSender::work() {
  static thread_local std::mt19937 jitter{std::random_device{}()};
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stopping_) return;
    if (queue_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const auto due = queue_.begin()->first;
    if (due > WebhookClock::now()) {
      wake_.wait_until(lock, due);
      continue;
    }
    Pending pending = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    ++inFlight_;
    lock.unlock();
    const int status = post(pending);
    lock.lock();
    --inFlight_;
    const bool retryable = status == 0 || status == 408 || status == 429 || status >= 500;
    // How the delivery ended, told outside the lock; a retry has not ended.
    auto ended = [&](bool delivered) {
      if (!pending.delivery.done) return;
      lock.unlock();
      pending.delivery.done(delivered);
      lock.lock();
    };
    if (status >= 200 && status < 300) {
      ++stats_.delivered;
      ended(true);
    } else if (status < 0) {
      ++stats_.refused;
      ended(false);
    } else if (retryable && pending.attempt < options_.maxRetries && !stopping_ &&
               queue_.size() < options_.maxQueue) {
      ++stats_.retries;
      // Exponential backoff with up to 25 % less, so that retries of one outage spread.
      auto delay = options_.retryDelay;
      for (int i = 0; i < pending.attempt && delay < options_.maxRetryDelay; ++i)
        delay *= 2;
      delay = std::min(delay, options_.maxRetryDelay);
      delay -= std::chrono::milliseconds(
          std::uniform_int_distribution<int64_t>(0, delay.count() / 4)(jitter));
      ++pending.attempt;
      queue_.emplace(WebhookClock::now() + delay, std::move(pending));
      wake_.notify_one();
    } else {
      ++stats_.failed;
      const std::string url = pending.delivery.url.substr(0, 128);
      lock.unlock();
      writeLog(options_.log, "webhook: " + url + " answered " +
                                 (status ? std::to_string(status) : std::string("nothing")) +
                                 "; the delivery is given up on");
      if (pending.delivery.done) pending.delivery.done(false);
      lock.lock();
    }
    quiet_.notify_all();
  }
}

int WebhookSender::post(const Pending& pending) {
  const WebhookDelivery& d = pending.delivery;
  const auto parts = parseWebhookUrl(d.url);
  if (!parts) return -1;
  const std::string host = bareHost(parts->host);
  const bool literal = classifyAddress(host) != AddressKind::Invalid;
  const std::vector<std::string> addresses =
      literal ? std::vector<std::string>{host}
              : (options_.resolve ? options_.resolve(host) : resolveWebhookHost(host));
  if (addresses.empty()) return 0;  // not resolved now: maybe later
  // Every address must be allowed: curl may connect to any of them.
  for (const std::string& address : addresses) {
    const AddressKind kind = classifyAddress(address);
    const bool allowed =
        (kind == AddressKind::Public && parts->scheme == "https") ||
        (kind == AddressKind::Loopback && options_.allowLoopback) ||
        (kind == AddressKind::Private && options_.allowPrivate && parts->scheme == "https");
    if (!allowed) {
      writeLog(options_.log, "webhook: " + parts->host.substr(0, 128) + " is " + address +
                                 (kind == AddressKind::Loopback  ? ", a loopback address"
                                  : kind == AddressKind::Private ? ", a private address"
                                  : parts->scheme == "http"      ? ", not loopback, over http"
                                                                 : ", not an address") +
                                 ": not sent (docs/service.md, \"Webhooks\")");
      return -1;
    }
  }

  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy(curl_easy_init(), &curl_easy_cleanup);
  if (!easy) return 0;
  std::vector<std::string> lines = {"Content-Type: application/json",
                                    "Expect:", "User-Agent: parley/" + std::string(kVersion),
                                    "X-Parley-Delivery: " + pending.id};
  if (!d.event.empty()) lines.push_back("X-Parley-Event: " + d.event);
  if (!options_.secret.empty()) {
    lines.push_back("X-Parley-Signature-256: " + webhookSignature(options_.secret, d.body));
  }
  for (const auto& [name, value] : d.headers)
    lines.push_back(name + ": " + value);
  curl_slist* list = nullptr;
  for (const std::string& line : lines)
    list = curl_slist_append(list, line.c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(list, &curl_slist_free_all);
  // The post goes to the addresses checked above, not to a second lookup.
  curl_slist* pin = nullptr;
  if (!literal) {
    std::string entry = host + ":" + parts->port + ":";
    for (size_t i = 0; i < addresses.size(); ++i) {
      const bool v6 = addresses[i].find(':') != std::string::npos;
      entry += (i ? "," : "") + (v6 ? "[" + addresses[i] + "]" : addresses[i]);
    }
    pin = curl_slist_append(pin, entry.c_str());
  }
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> pins(pin, &curl_slist_free_all);
  CURL* c = easy.get();
  curl_easy_setopt(c, CURLOPT_URL, d.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (pins) curl_easy_setopt(c, CURLOPT_RESOLVE, pins.get());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, d.body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(d.body.size()));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout.count()));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // no proxy from the environment
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, options_.allowLoopback ? "http,https" : "https");
  // The answer is not read: only its status matters.
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION,
      +[](char*, size_t size, size_t count, void*) { return size * count; });
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  return static_cast<int>(status);
}

bool WebhookSender::idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return quiet_.wait_for(lock, timeout, [&] { return queue_.empty() && inFlight_ == 0; });
}

void WebhookSender::stop() {
  std::vector<std::thread> threads;
  std::vector<std::function<void(bool)>> dropped;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    stats_.dropped += queue_.size();
    for (auto& [due, pending] : queue_)
      if (pending.delivery.done) dropped.push_back(std::move(pending.delivery.done));
    queue_.clear();
    threads.swap(threads_);
  }
  for (auto& done : dropped)
    done(false);
  wake_.notify_all();
  for (std::thread& thread : threads)
    thread.join();
  quiet_.notify_all();
}

WebhookStats WebhookSender::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace parley::service
