// The OTLP/HTTP exporter (docs/telemetry.md): a Telemetry (telemetry.hpp) that batches finished
// spans and aggregated metrics on a background thread and posts them to an OpenTelemetry
// collector or backend, in the protobuf or the JSON encoding, over libcurl. Configured by a
// TelemetryOptions, which the standard OTEL_* environment variables fill.
//
// A turn never waits for it: exportSpan() appends to a bounded queue under a short lock and, when
// the queue is full, drops the span and counts it (stats().spansDropped). Failed posts are retried
// with exponential backoff (429, 502, 503, 504 and unreachable receivers), then dropped and
// counted. shutdown() (also the destructor) exports what is queued within exportTimeout.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parley/logger.hpp"
#include "parley/telemetry.hpp"

namespace parley {

struct TelemetryOptions {
  // OTEL_EXPORTER_OTLP_ENDPOINT: the base URL ("http://localhost:4318"); traces are posted to
  // <endpoint>/v1/traces and metrics to <endpoint>/v1/metrics. "" and no signal URL: no export.
  std::string endpoint;
  std::string tracesEndpoint;   // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: used as is
  std::string metricsEndpoint;  // OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: used as is
  // OTEL_EXPORTER_OTLP_HEADERS ("api-key=secret,x=y"): sent with every post, as "Name: value".
  std::vector<std::string> headers;
  // OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" (the default) or "http/json".
  enum class Encoding { Protobuf, Json };
  Encoding encoding = Encoding::Protobuf;
  std::string serviceName = "parley";  // OTEL_SERVICE_NAME (wins over the resource's)
  // OTEL_RESOURCE_ATTRIBUTES ("deployment.environment=prod,host.name=a"), as key and value.
  std::vector<std::pair<std::string, std::string>> resourceAttributes;
  bool disabled = false;  // OTEL_SDK_DISABLED=true: nothing is recorded at all
  // OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true: record messages, system
  // instructions, tool arguments and results (redacted of secret-looking keys). Off by default.
  bool captureContent = false;

  size_t maxQueueSize = 2048;       // OTEL_BSP_MAX_QUEUE_SIZE: spans waiting; more are dropped
  size_t maxExportBatchSize = 512;  // OTEL_BSP_MAX_EXPORT_BATCH_SIZE: spans per post
  std::chrono::milliseconds scheduleDelay{5000};     // OTEL_BSP_SCHEDULE_DELAY: between posts
  std::chrono::milliseconds exportTimeout{10'000};   // OTEL_EXPORTER_OTLP_TIMEOUT: one post
  std::chrono::milliseconds metricInterval{60'000};  // OTEL_METRIC_EXPORT_INTERVAL
  int maxRetries = 3;                                // after the first attempt of a post
  std::chrono::milliseconds retryDelay{500};         // the first backoff; doubles each retry

  // A seam for tests and benchmarks: posts one body and returns the HTTP status (0: the
  // receiver was not reached). Null: libcurl.
  std::function<int(const std::string& url, const std::string& contentType,
                    const std::string& body)>
      send;

  // The options the OTEL_* variables give (the list above). An unsupported protocol ("grpc") is
  // logged and replaced by http/protobuf; a malformed number or a value over its cap is a
  // ValidationError naming the variable.
  static TelemetryOptions fromEnvironment(const Logger& log = {});
  // Whether these options export anything (not disabled; an endpoint or a send seam).
  bool active() const noexcept;
};

struct TelemetryStats {
  uint64_t spansExported = 0;
  uint64_t spansDropped = 0;    // the queue was full, or the receiver refused them for good
  uint64_t exportFailures = 0;  // posts given up on after their retries
  uint64_t retries = 0;
  uint64_t metricExports = 0;
};

class OtlpExporter : public Telemetry {
 public:
  // ValidationError for options out of range (a queue or batch of 0, a timeout <= 0).
  explicit OtlpExporter(TelemetryOptions options, Logger log = {});
  ~OtlpExporter() override;  // shutdown()
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  void exportSpan(SpanData&& span) noexcept override;
  void recordHistogram(std::string_view name, double value,
                       const std::vector<Attribute>& attributes) noexcept override;
  void addCounter(std::string_view name, int64_t delta,
                  const std::vector<Attribute>& attributes) noexcept override;
  bool captureContent() const noexcept override;

  // Posts what is queued (spans, then the metrics) and waits for it, at most `timeout`; true
  // when everything queued before the call was handled (exported or given up on).
  bool flush(std::chrono::milliseconds timeout);
  // Stops the thread after a last export bounded by exportTimeout; later spans are dropped.
  void shutdown();
  TelemetryStats stats() const;
  // The metrics recorded so far in the Prometheus text format (0.0.4): `parley serve` adds them
  // to /metrics. Names as OTLP's with dots as underscores and the unit's suffix
  // (gen_ai_client_operation_duration_seconds, parley_run_claims_total).
  std::string prometheusText() const;
  const TelemetryOptions& options() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Reads the environment (TelemetryOptions::fromEnvironment) and, when it asks for an export,
// installs an OtlpExporter as the process's Telemetry (setTelemetry) and returns it; null
// otherwise. A host calls it once at start and shutdown() (or setTelemetry(nullptr) and drops
// the pointer) at exit, so that the last spans are sent.
std::shared_ptr<OtlpExporter> installTelemetryFromEnvironment(const Logger& log = {});

}  // namespace parley
