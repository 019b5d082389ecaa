// Spans and metrics for OpenTelemetry (docs/telemetry.md): the W3C trace context, a Span that
// ends itself, the thread's current span, and the Telemetry interface that receives finished
// spans and metric records. parley's code starts spans through this header only; what happens
// to them is the installed Telemetry's business: the OTLP exporter (otlp.hpp) or a host's own.
//
// Off by default: with no Telemetry installed a Span is one relaxed atomic load and a null
// pointer; its setters do nothing and allocate nothing (bench/telemetry_bench.cpp).
//
// Thread-safety: setTelemetry()/telemetry() may be called from any thread. A Span belongs to the
// thread that started it (it is that thread's current span until it ends); its context() may be
// handed to another thread, which continues the trace under a ContextScope. A Telemetry must be
// safe to call from several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace parley {

// A W3C trace context (https://www.w3.org/TR/trace-context/): which trace, which span in it.
struct TraceContext {
  std::array<uint8_t, 16> traceId{};
  std::array<uint8_t, 8> spanId{};
  uint8_t flags = 0;       // bit 0: sampled
  std::string traceState;  // the tracestate header, carried as is (at most 512 bytes kept)
  bool remote = false;     // received from another process (a header, a stored run)

  // A trace id and a span id that are not all zeros.
  bool valid() const noexcept;
  std::string traceIdHex() const;
  std::string spanIdHex() const;
  // "00-<32 hex>-<16 hex>-<2 hex>"; "" when not valid.
  std::string traceparent() const;
  // Reads a traceparent header (version 00, or a later version's first four fields), and a
  // tracestate kept when at most 512 bytes. nullopt for anything malformed (the W3C rule: an
  // invalid header is ignored and a new trace starts).
  static std::optional<TraceContext> parse(std::string_view traceparent,
                                           std::string_view tracestate = {});
};

// OTLP's numbering.
enum class SpanKind { Internal = 1, Server = 2, Client = 3, Producer = 4, Consumer = 5 };

using AttributeValue = std::variant<std::string, bool, int64_t, double, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

// A finished span, as the Telemetry receives it.
struct SpanData {
  std::string name;
  SpanKind kind = SpanKind::Internal;
  TraceContext context;               // its own ids
  std::array<uint8_t, 8> parentId{};  // zeros: a root span
  bool parentRemote = false;
  int64_t startNs = 0;  // Unix epoch, nanoseconds
  int64_t endNs = 0;
  std::vector<Attribute> attributes;
  bool error = false;  // status ERROR (else UNSET)
  std::string statusMessage;
};

// Where finished spans and metric records go. Install one with setTelemetry().
class Telemetry {
 public:
  virtual ~Telemetry() = default;
  // A span ended. Must not block for long: it runs on the thread that ended the span (a turn).
  virtual void exportSpan(SpanData&& span) noexcept = 0;
  // One measurement of a histogram (`name` as docs/telemetry.md lists them, in its unit).
  virtual void recordHistogram(std::string_view name, double value,
                               const std::vector<Attribute>& attributes) noexcept {
    (void)name, (void)value, (void)attributes;
  }
  // Adds `delta` to a counter (up-down when delta may be negative: the queue depth).
  virtual void addCounter(std::string_view name, int64_t delta,
                          const std::vector<Attribute>& attributes) noexcept {
    (void)name, (void)delta, (void)attributes;
  }
  // Whether message content (gen_ai.input.messages, ...) is recorded: off unless opted in.
  virtual bool captureContent() const noexcept { return false; }
};

// The process's Telemetry; null (the default) turns every span and record into nothing.
void setTelemetry(std::shared_ptr<Telemetry> telemetry);
std::shared_ptr<Telemetry> telemetry();
// Whether one is installed (one relaxed atomic load).
bool telemetryEnabled() noexcept;

// The context of the thread's current span (or of a ContextScope); not valid when there is none.
TraceContext currentTraceContext();

// Makes `context` the thread's current one until it is destroyed: a remote parent (a request's
// traceparent, a stored run) or a span's context carried to a pool thread. An invalid context
// leaves the thread as it was.
class ContextScope {
 public:
  explicit ContextScope(const TraceContext& context);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  bool active_ = false;
  TraceContext previous_;
};

namespace detail {
struct LiveSpan;
}

// One span, started at construction under the thread's current context (or `parent`) and ended
// by end() or the destructor; it is the thread's current span meanwhile. Its name is
// "<operation> <target>" (the conventions' "chat gpt-4o"), or the operation alone when the target
// is empty.
class Span {
 public:
  Span() noexcept;  // records nothing
  Span(std::string_view operation, std::string_view target, SpanKind kind = SpanKind::Internal);
  Span(std::string_view operation, std::string_view target, SpanKind kind,
       const TraceContext& parent);
  ~Span();
  Span(Span&&) noexcept;
  Span& operator=(Span&&) noexcept;

  // False when telemetry is off: setters then do nothing (test it before building a costly value).
  bool recording() const noexcept { return live_ != nullptr; }
  void set(std::string_view key, std::string_view value);
  void set(std::string_view key, const char* value) { set(key, std::string_view(value)); }
  void set(std::string_view key, int64_t value);
  void set(std::string_view key, int value) { set(key, static_cast<int64_t>(value)); }
  void set(std::string_view key, double value);
  void set(std::string_view key, bool value);
  void set(std::string_view key, std::vector<std::string> value);
  // status ERROR, error.type = `type`, the message kept as the status description.
  void setError(std::string_view type, std::string_view message);
  // Sets error.type from a parley error (errorToJson's kind, or the C++ type's name) and status.
  void setError(const std::exception& e);
  // This span's context (not valid when not recording).
  TraceContext context() const;
  void end() noexcept;

 private:
  std::unique_ptr<detail::LiveSpan> live_;
};

// A histogram measurement / counter change through the installed Telemetry (nothing when off).
void recordHistogram(std::string_view name, double value, const std::vector<Attribute>& attributes);
void addCounter(std::string_view name, int64_t delta, const std::vector<Attribute>& attributes);

}  // namespace parley
