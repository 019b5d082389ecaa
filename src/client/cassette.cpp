// Cassettes (parley/cassette.hpp, docs/cassettes.md): the recording and replaying transport.
#include "parley/cassette.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "client/http_transport.hpp"
#include "model/secrets.hpp"
#include "model/sha256.hpp"
#include "parley/json.hpp"

namespace parley {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kCassetteVersion = 1;

// Headers that change from call to call without changing what is asked: not keyed, not written.
bool volatileHeader(const std::string& lowerName) {
  return lowerName == "user-agent" || lowerName == "date" || lowerName == "traceparent" ||
         lowerName == "tracestate" || lowerName == "x-request-id" ||
         lowerName == "idempotency-key" || lowerName.rfind("x-stainless-", 0) == 0;
}

std::string lowered(std::string text) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// "https://host:1/v1/chat?x=1" -> "/v1/chat?x=1": the host is not part of what is asked (a mock
// on another port, a proxy), so a recording replays wherever the client points.
std::string pathOf(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t slash = url.find('/', scheme + 3);
  return slash == std::string_view::npos ? std::string("/") : std::string(url.substr(slash));
}

struct Recording {
  std::string file;
  json request;  // the canonical request as written
};

// The messages array of a body of any protocol (null when there is none).
const json& cassetteMessages(const json& body) {
  static const json kNone;
  if (!body.is_object()) return kNone;
  for (const char* key : {"messages", "input", "contents"}) {
    const auto it = body.find(key);
    if (it != body.end() && it->is_array()) return *it;
  }
  return kNone;
}

class CassetteTransport final : public HttpTransport {
 public:
  CassetteTransport(CassetteOptions options,
                    std::function<std::shared_ptr<HttpTransport>()> makeInner,
                    std::vector<std::string> secrets)
      : options_(std::move(options)), makeInner_(std::move(makeInner)) {
    if (options_.directory.empty()) {
      throw ValidationError("cassettes.directory", "must name a directory");
    }
    if (options_.maxExchangeBytes == 0 || options_.maxExchanges == 0) {
      throw ValidationError("cassettes", "caps must be positive");
    }
    for (std::string& s : secrets) {
      if (s.size() >= detail::kMinSecretLength) secrets_.push_back(std::move(s));
    }
    for (const std::string& pattern : options_.redactPatterns) {
      try {
        patterns_.emplace_back(pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw ValidationError("cassettes.redactPatterns",
                              "\"" + pattern + "\" is no regular expression: " + e.what());
      }
    }
    if (options_.mode != CassetteMode::ReplayOnly) {
      std::error_code ec;
      fs::create_directories(options_.directory, ec);
      if (ec) {
        throw ValidationError("cassettes.directory",
                              "cannot create " + options_.directory + ": " + ec.message());
      }
    } else if (!fs::is_directory(options_.directory)) {
      throw ValidationError("cassettes.directory", "no directory at " + options_.directory);
    }
  }

  void send(const HttpRequest& request, HttpReplySink& sink) override {
    detail::replayedReceivedAt().reset();
    std::vector<std::string> secrets = detail::secretHeaderValues(request.headers);
    secrets.insert(secrets.end(), secrets_.begin(), secrets_.end());
    json canonical = canonicalRequest(request, secrets);
    const std::string key = detail::sha256Hex(canonical.dump());
    size_t occurrence = 0;
    {
      std::lock_guard lock(mutex_);
      occurrence = occurrences_[key]++;
    }
    if (options_.mode != CassetteMode::Record) {
      if (auto file = recordedFile(key, occurrence)) {
        replay(*file, key, canonical, request, sink);
        return;
      }
      if (options_.mode == CassetteMode::ReplayOnly) throw miss(canonical);
    }
    record(request, sink, canonical, key, fileName(key, occurrence), secrets);
  }

 private:
  // A string of what is written or keyed, with the secrets and the configured patterns redacted.
  std::string redacted(std::string text, const std::vector<std::string>& secrets) const {
    text = detail::redactSecrets(std::move(text), secrets);
    for (const std::regex& pattern : patterns_)
      text = std::regex_replace(text, pattern, "[redacted]");
    return text;
  }

  void redactStrings(json& value, const std::vector<std::string>& secrets) const {
    if (value.is_string()) {
      value = redacted(value.get<std::string>(), secrets);
    } else if (value.is_structured()) {
      for (json& child : value)
        redactStrings(child, secrets);
    }
  }

  json canonicalRequest(const HttpRequest& request, const std::vector<std::string>& secrets) const {
    json headers = json::array();
    for (const std::string& line : request.headers) {
      const size_t colon = line.find(':');
      const std::string name = lowered(line.substr(0, colon));
      if (detail::looksSecret(name) || volatileHeader(name)) continue;
      std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      headers.push_back(redacted(name + ": " + value, secrets));
    }
    std::sort(headers.begin(), headers.end());
    json body = nullptr;
    if (request.method == HttpMethod::Post) {
      try {
        body = parseJson(request.body);  // nlohmann's objects sort their keys: canonical order
      } catch (const ProtocolError&) {
        body = std::string(request.body);
      }
      redactStrings(body, secrets);
    }
    return {{"method", request.method == HttpMethod::Post ? "POST" : "GET"},
            {"path", redacted(pathOf(request.url), secrets)},
            {"stream", request.stream},
            {"headers", std::move(headers)},
            {"body", std::move(body)}};
  }

  std::string fileName(const std::string& key, size_t occurrence) const {
    return (fs::path(options_.directory) /
            (key.substr(0, 16) + "-" + std::to_string(occurrence) + ".json"))
        .string();
  }

  // The recording of this occurrence of `key`, else the last one before it (a request repeated
  // more often than it was recorded gets the last reply).
  std::optional<std::string> recordedFile(const std::string& key, size_t occurrence) const {
    for (size_t n = occurrence + 1; n-- > 0;) {
      std::string file = fileName(key, n);
      std::error_code ec;
      if (fs::is_regular_file(file, ec)) return file;
    }
    return std::nullopt;
  }

  json readExchange(const std::string& file) const {
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) throw ValidationError("cassette", "cannot read " + file + ": " + ec.message());
    if (size > options_.maxExchangeBytes) {
      throw ValidationError("cassette", file + " holds " + std::to_string(size) +
                                            " bytes, over the cap of " +
                                            std::to_string(options_.maxExchangeBytes));
    }
    std::ifstream in(file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
      json exchange = parseJson(text.str());
      if (!exchange.is_object() || exchange.value("version", 0) != kCassetteVersion) {
        throw ValidationError("cassette", file + " is not a version " +
                                              std::to_string(kCassetteVersion) + " cassette");
      }
      return exchange;
    } catch (const ProtocolError& e) {
      throw ValidationError("cassette", file + " is not JSON: " + e.what());
    }
  }

  void replay(const std::string& file, const std::string& key, const json& canonical,
              const HttpRequest& request, HttpReplySink& sink) {
    if (request.stopToken.stop_requested()) throw CancelledError("the call was cancelled");
    const json exchange = readExchange(file);
    if (exchange.value("key", "") != key) throw miss(exchange.value("request", json()));
    // A file whose request was edited after it was recorded no longer says what it answers.
    if (detail::sha256Hex(exchange.value("request", json()).dump()) != key) {
      throw edited(file, exchange.value("request", json()), canonical);
    }
    const json& response = exchange.at("response");
    HttpReplyInfo info{response.value("status", 200), response.value("request_id", "")};
    sink.reset();
    if (response.contains("events")) {
      const auto start = std::chrono::steady_clock::now();
      std::string lastEventId;
      for (const json& e : response.at("events")) {
        if (options_.realtime) {
          waitUntil(start + std::chrono::milliseconds(e.value("t_ms", int64_t{0})),
                    request.stopToken);
        }
        SseEvent event;
        event.type = e.value("event", "message");
        event.data = e.value("data", "");
        if (e.contains("id")) lastEventId = e["id"].get<std::string>();
        event.lastEventId = lastEventId;
        if (e.contains("retry")) event.retry = e["retry"].get<int64_t>();
        if (!sink.onEvent(event, info)) throw CancelledError("the call was cancelled");
      }
      sink.onStreamEnd(info);
    } else {
      sink.onBody(response.value("body", ""), info);
    }
    if (const auto at = response.find("received_at_ms"); at != response.end()) {
      detail::replayedReceivedAt() =
          std::chrono::system_clock::time_point(std::chrono::milliseconds(at->get<int64_t>()));
    }
  }

  static void waitUntil(std::chrono::steady_clock::time_point when, const std::stop_token& stop) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    cv.wait_until(lock, stop, when, [] { return false; });
    if (stop.stop_requested()) throw CancelledError("the call was cancelled");
  }

  // Forwards everything to the caller's sink and keeps a copy of it.
  class RecordingSink final : public HttpReplySink {
   public:
    explicit RecordingSink(HttpReplySink& inner) : inner_(inner) {}
    void reset() override {
      events_ = json::array();
      body_.reset();
      start_ = std::chrono::steady_clock::now();
      lastId_.clear();
      inner_.reset();
    }
    bool onEvent(const SseEvent& event, const HttpReplyInfo& reply) override {
      info_ = reply;
      json e = {{"t_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start_)
                             .count()},
                {"event", event.type},
                {"data", event.data}};
      if (event.lastEventId != lastId_) e["id"] = lastId_ = event.lastEventId;
      if (event.retry) e["retry"] = *event.retry;
      events_.push_back(std::move(e));
      return inner_.onEvent(event, reply);
    }
    void onStreamEnd(const HttpReplyInfo& reply) override {
      info_ = reply;
      inner_.onStreamEnd(reply);
    }
    bool streamComplete() const noexcept override { return inner_.streamComplete(); }
    bool delivered() const noexcept override { return inner_.delivered(); }
    void onBody(std::string_view body, const HttpReplyInfo& reply) override {
      info_ = reply;
      body_ = std::string(body);
      inner_.onBody(body, reply);
    }

    json events_ = json::array();
    std::optional<std::string> body_;
    HttpReplyInfo info_;

   private:
    HttpReplySink& inner_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::string lastId_;
  };

  std::shared_ptr<HttpTransport> inner() {
    std::lock_guard lock(mutex_);
    if (!inner_) inner_ = makeInner_();
    return inner_;
  }

  void record(const HttpRequest& request, HttpReplySink& sink, json canonical,
              const std::string& key, const std::string& file,
              const std::vector<std::string>& secrets) {
    RecordingSink recording(sink);
    inner()->send(request, recording);
    const auto receivedAt =
        std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
    json response = {{"status", recording.info_.status},
                     {"received_at_ms", receivedAt.time_since_epoch().count()},
                     {"request_id", redacted(recording.info_.requestId, secrets)}};
    if (recording.body_) {
      response["body"] = redacted(*recording.body_, secrets);
    } else {
      for (json& e : recording.events_)
        e["data"] = redacted(e["data"].get<std::string>(), secrets);
      response["events"] = std::move(recording.events_);
    }
    const json exchange = {{"version", kCassetteVersion},
                           {"key", key},
                           {"url", redacted(pathOf(request.url), secrets)},
                           {"request", std::move(canonical)},
                           {"response", std::move(response)}};
    const std::string text = exchange.dump(2) + "\n";
    if (text.size() > options_.maxExchangeBytes) {
      throw ValidationError("cassette", "the exchange takes " + std::to_string(text.size()) +
                                            " bytes, over the cap of " +
                                            std::to_string(options_.maxExchangeBytes) +
                                            " (CassetteOptions::maxExchangeBytes); not recorded");
    }
    // Written beside and renamed: a reader never sees half a file.
    const std::string temporary =
        file + ".tmp" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out << text;
      if (!out.flush()) throw ValidationError("cassette", "cannot write " + temporary);
    }
    std::error_code ec;
    fs::rename(temporary, file, ec);
    if (ec) throw ValidationError("cassette", "cannot write " + file + ": " + ec.message());
    detail::replayedReceivedAt() = receivedAt;  // the recorded thread says what a replay will
  }

  // Every recording of the directory, read once (for explaining misses).
  const std::vector<Recording>& recordings() {
    std::lock_guard lock(mutex_);
    if (indexed_) return index_;
    size_t files = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(options_.directory)) {
      if (entry.path().extension() != ".json") continue;
      if (++files > options_.maxExchanges) {
        throw ValidationError("cassette", options_.directory + " holds more than " +
                                              std::to_string(options_.maxExchanges) +
                                              " recordings (CassetteOptions::maxExchanges)");
      }
      json exchange = readExchange(entry.path().string());
      index_.push_back({entry.path().filename().string(), exchange.value("request", json())});
    }
    std::sort(index_.begin(), index_.end(),
              [](const Recording& a, const Recording& b) { return a.file < b.file; });
    indexed_ = true;
    return index_;
  }

  static std::string describe(const CacheDiagnostic::Difference& difference) {
    return difference.message ? "message " + std::to_string(*difference.message) + " field \"" +
                                    difference.field + "\""
                              : "\"" + difference.field + "\"";
  }

  // The nearest recording of a request and where they part, the first different field
  // (firstRequestDifference(), else the URL, the stream flag or the headers).
  static CacheDiagnostic::Difference difference(const json& recorded, const json& canonical) {
    std::optional<CacheDiagnostic::Difference> found =
        firstRequestDifference(recorded.value("body", json()), canonical.value("body", json()),
                               recorded.value("path", ""), canonical.value("path", ""));
    if (found) return *found;
    return {std::nullopt, recorded.value("path", "") != canonical.value("path", "") ? "url"
                          : recorded.value("stream", false) != canonical.value("stream", false)
                              ? "stream"
                              : "headers"};
  }

  CassetteMiss edited(const std::string& file, const json& recorded, const json& canonical) {
    CacheDiagnostic::Difference where = difference(recorded, canonical);
    // The text first: the argument the difference moves into may be made before it.
    const std::string reason = "the recording " + fs::path(file).filename().string() + " in " +
                               options_.directory +
                               " was edited: its request is not the one it was recorded for, "
                               "and differs from this one first at " +
                               describe(where);
    return CassetteMiss(reason, std::move(where));
  }

  CassetteMiss miss(const json& canonical) {
    const std::string what = canonical.value("method", "") + " " + canonical.value("path", "");
    const std::vector<Recording>& all = recordings();
    // The nearest recording: the same path, the longest run of equal leading messages, the same
    // number of messages; then the cache diagnostic's comparison names where they part.
    const Recording* nearest = nullptr;
    std::tuple<bool, size_t, bool> best{false, 0, false};
    const json& body = canonical["body"];
    const json& messages = cassetteMessages(body);
    for (const Recording& r : all) {
      // value() returns a copy: keep it alive while its messages are read.
      const json theirBody = r.request.value("body", json());
      const json& theirs = cassetteMessages(theirBody);
      size_t prefix = 0;
      while (prefix < messages.size() && prefix < theirs.size() &&
             messages[prefix] == theirs[prefix]) {
        ++prefix;
      }
      std::tuple<bool, size_t, bool> score{r.request.value("path", "") == canonical["path"], prefix,
                                           theirs.size() == messages.size()};
      if (!nearest || score > best) {
        nearest = &r;
        best = score;
      }
    }
    if (!nearest) {
      return CassetteMiss(
          "no recording of " + what + " in " + options_.directory + " (the directory holds none)",
          std::nullopt);
    }
    CacheDiagnostic::Difference where = difference(nearest->request, canonical);
    const std::string reason = "no recording of " + what + " in " + options_.directory +
                               "; the nearest (" + nearest->file + ") differs first at " +
                               describe(where);
    return CassetteMiss(reason, std::move(where));
  }

  CassetteOptions options_;
  std::function<std::shared_ptr<HttpTransport>()> makeInner_;
  std::vector<std::string> secrets_;
  std::vector<std::regex> patterns_;
  std::mutex mutex_;
  std::shared_ptr<HttpTransport> inner_;
  std::map<std::string, size_t> occurrences_;
  bool indexed_ = false;
  std::vector<Recording> index_;
};

}  // namespace

const char* toString(CassetteMode mode) noexcept {
  switch (mode) {
    case CassetteMode::Record:
      return "record";
    case CassetteMode::ReplayOnly:
      return "replay-only";
    case CassetteMode::ReplayOrRecord:
      return "replay-or-record";
  }
  return "replay-only";
}

CassetteMode cassetteModeFromString(const std::string& name, const std::string& field) {
  for (CassetteMode mode :
       {CassetteMode::Record, CassetteMode::ReplayOnly, CassetteMode::ReplayOrRecord}) {
    if (name == toString(mode)) return mode;
  }
  throw ValidationError(
      field, "unknown cassette mode \"" + name + "\" (record, replay-only or replay-or-record)");
}

std::optional<CassetteOptions> cassetteOptionsFromEnv() {
  const char* value = std::getenv("PARLEY_CASSETTES");
  if (!value || !*value) return std::nullopt;
  std::string text(value);
  CassetteOptions options;
  for (const char* mode : {"record:", "replay-only:", "replay-or-record:"}) {
    const std::string prefix(mode);
    if (text.rfind(prefix, 0) == 0) {
      options.mode =
          cassetteModeFromString(prefix.substr(0, prefix.size() - 1), "PARLEY_CASSETTES");
      text = text.substr(prefix.size());
      break;
    }
  }
  options.directory = text;
  if (options.directory.empty()) throw ValidationError("PARLEY_CASSETTES", "names no directory");
  return options;
}

CassetteMiss::CassetteMiss(const std::string& reason,
                           std::optional<CacheDiagnostic::Difference> difference)
    : ValidationError("cassette", reason), difference_(std::move(difference)) {}

std::shared_ptr<HttpTransport> makeCassetteTransport(
    CassetteOptions options, std::function<std::shared_ptr<HttpTransport>()> makeInner,
    std::vector<std::string> secrets) {
  return std::make_shared<CassetteTransport>(std::move(options), std::move(makeInner),
                                             std::move(secrets));
}

}  // namespace parley
