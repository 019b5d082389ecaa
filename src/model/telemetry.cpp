#include "parley/telemetry.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>

#include "parley/errors.hpp"

namespace parley {

namespace {

constexpr size_t kMaxTraceStateBytes = 512;      // W3C: a vendor may drop a longer one
constexpr size_t kMaxStatusMessageBytes = 1024;  // a status is a hint, not the error's body

std::atomic<bool> gEnabled{false};
std::mutex gMutex;
std::shared_ptr<Telemetry> gTelemetry;

// The thread's current context: its innermost live Span or ContextScope.
thread_local TraceContext tCurrent;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <size_t N>
void randomId(std::array<uint8_t, N>& id) {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  do {
    for (size_t i = 0; i < N; i += 8) {
      uint64_t r = engine();
      for (size_t j = 0; j < 8 && i + j < N; ++j)
        id[i + j] = static_cast<uint8_t>(r >> (8 * j));
    }
  } while (std::all_of(id.begin(), id.end(), [](uint8_t b) { return b == 0; }));
}

template <size_t N>
bool allZero(const std::array<uint8_t, N>& id) {
  for (uint8_t b : id)
    if (b) return false;
  return true;
}

template <size_t N>
std::string hex(const std::array<uint8_t, N>& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * N, '0');
  for (size_t i = 0; i < N; ++i) {
    out[2 * i] = kHex[id[i] >> 4];
    out[2 * i + 1] = kHex[id[i] & 0xF];
  }
  return out;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lowercase only
}

template <size_t N>
bool readHex(std::string_view text, std::array<uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    int hi = hexDigit(text[2 * i]), lo = hexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

bool TraceContext::valid() const noexcept {
  return !allZero(traceId) && !allZero(spanId);
}

std::string TraceContext::traceIdHex() const {
  return hex(traceId);
}

std::string TraceContext::spanIdHex() const {
  return hex(spanId);
}

std::string TraceContext::traceparent() const {
  if (!valid()) return "";
  std::array<uint8_t, 1> f{flags};
  return "00-" + hex(traceId) + "-" + hex(spanId) + "-" + hex(f);
}

std::optional<TraceContext> TraceContext::parse(std::string_view header,
                                                std::string_view tracestate) {
  // Surrounding blanks are allowed by HTTP; the fields are fixed-width.
  while (!header.empty() && (header.front() == ' ' || header.front() == '\t'))
    header.remove_prefix(1);
  while (!header.empty() && (header.back() == ' ' || header.back() == '\t'))
    header.remove_suffix(1);
  if (header.size() < 55) return std::nullopt;
  std::array<uint8_t, 1> version{}, flags{};
  if (!readHex(header.substr(0, 2), version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append "-..." fields.
  if (version[0] == 0 && header.size() != 55) return std::nullopt;
  if (header.size() > 55 && header[55] != '-') return std::nullopt;
  if (header[2] != '-' || header[35] != '-' || header[52] != '-') return std::nullopt;
  TraceContext context;
  if (!readHex(header.substr(3, 32), context.traceId) ||
      !readHex(header.substr(36, 16), context.spanId) || !readHex(header.substr(53, 2), flags)) {
    return std::nullopt;
  }
  if (!context.valid()) return std::nullopt;
  context.flags = flags[0];
  // A tracestate goes out again as a header: only printable ASCII is carried.
  if (tracestate.size() <= kMaxTraceStateBytes &&
      std::all_of(tracestate.begin(), tracestate.end(),
                  [](char c) { return c >= 0x20 && c < 0x7f; })) {
    context.traceState = std::string(tracestate);
  }
  context.remote = true;
  return context;
}

void setTelemetry(std::shared_ptr<Telemetry> t) {
  std::lock_guard lock(gMutex);
  gTelemetry = std::move(t);
  gEnabled.store(gTelemetry != nullptr, std::memory_order_release);
}

std::shared_ptr<Telemetry> telemetry() {
  if (!gEnabled.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(gMutex);
  return gTelemetry;
}

bool telemetryEnabled() noexcept {
  return gEnabled.load(std::memory_order_relaxed);
}

TraceContext currentTraceContext() {
  return tCurrent;
}

ContextScope::ContextScope(const TraceContext& context) {
  if (!context.valid()) return;
  active_ = true;
  previous_ = std::move(tCurrent);
  tCurrent = context;
}

ContextScope::~ContextScope() {
  if (active_) tCurrent = std::move(previous_);
}

namespace detail {

struct LiveSpan {
  std::shared_ptr<Telemetry> sink;
  SpanData data;
  TraceContext previous;  // the thread's current context before this span
};

}  // namespace detail

Span::Span() noexcept = default;

Span::Span(std::string_view operation, std::string_view target, SpanKind kind)
    : Span(operation, target, kind, tCurrent) {}

Span::Span(std::string_view operation, std::string_view target, SpanKind kind,
           const TraceContext& parent) {
  if (!telemetryEnabled()) return;
  auto sink = telemetry();
  if (!sink) return;
  live_ = std::make_unique<detail::LiveSpan>();
  live_->sink = std::move(sink);
  SpanData& d = live_->data;
  d.name.reserve(operation.size() + 1 + target.size());
  d.name.append(operation);
  if (!target.empty()) {
    d.name.push_back(' ');
    d.name.append(target);
  }
  d.kind = kind;
  if (parent.valid()) {
    d.context.traceId = parent.traceId;
    d.context.flags = parent.flags;
    d.context.traceState = parent.traceState;
    d.parentId = parent.spanId;
    d.parentRemote = parent.remote;
  } else {
    randomId(d.context.traceId);
    d.context.flags = 1;  // sampled: every span is exported (no sampler yet)
  }
  randomId(d.context.spanId);
  d.startNs = nowNs();
  live_->previous = std::move(tCurrent);
  tCurrent = d.context;
}

Span::~Span() {
  end();
}

Span::Span(Span&& other) noexcept : live_(std::move(other.live_)) {}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    live_ = std::move(other.live_);
  }
  return *this;
}

void Span::set(std::string_view key, std::string_view value) {
  if (live_) live_->data.attributes.push_back({std::string(key), std::string(value)});
}

void Span::set(std::string_view key, int64_t value) {
  if (live_) live_->data.attributes.push_back({std::string(key), value});
}

void Span::set(std::string_view key, double value) {
  if (live_) live_->data.attributes.push_back({std::string(key), value});
}

void Span::set(std::string_view key, bool value) {
  if (live_) live_->data.attributes.push_back({std::string(key), value});
}

void Span::set(std::string_view key, std::vector<std::string> value) {
  if (live_) live_->data.attributes.push_back({std::string(key), std::move(value)});
}

void Span::setError(std::string_view type, std::string_view message) {
  if (!live_) return;
  live_->data.error = true;
  live_->data.statusMessage = std::string(message.substr(0, kMaxStatusMessageBytes));
  set("error.type", type);
}

void Span::setError(const std::exception& e) {
  if (!live_) return;
  std::string type = "_OTHER";  // the conventions' fallback
  if (const auto* http = dynamic_cast<const HttpError*>(&e)) {
    type = std::to_string(http->status());  // the conventions use the status code
  } else if (const auto* error = dynamic_cast<const Error*>(&e)) {
    type = toString(error->kind());
  }
  setError(type, e.what());
}

TraceContext Span::context() const {
  return live_ ? live_->data.context : TraceContext{};
}

void Span::end() noexcept {
  if (!live_) return;
  std::unique_ptr<detail::LiveSpan> live = std::move(live_);
  live->data.endNs = nowNs();
  // Spans end in reverse order of their start on a thread; a span moved elsewhere and ended out
  // of order restores what was current when it started all the same.
  tCurrent = std::move(live->previous);
  live->sink->exportSpan(std::move(live->data));
}

void recordHistogram(std::string_view name, double value,
                     const std::vector<Attribute>& attributes) {
  if (!telemetryEnabled()) return;
  if (auto sink = telemetry()) sink->recordHistogram(name, value, attributes);
}

void addCounter(std::string_view name, int64_t delta, const std::vector<Attribute>& attributes) {
  if (!telemetryEnabled()) return;
  if (auto sink = telemetry()) sink->addCounter(name, delta, attributes);
}

}  // namespace parley
