// The bodies of OTLP/HTTP posts (opentelemetry-proto v1.x: ExportTraceServiceRequest and
// ExportMetricsServiceRequest), in the protobuf encoding (written here by hand: a small fixed
// subset of the schema, docs/telemetry.md says why) and in OTLP's JSON mapping (ids as hex,
// 64-bit integers as strings, camelCase keys, enums as numbers).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parley/telemetry.hpp"

namespace parley::detail {

struct OtlpResource {
  std::vector<Attribute> attributes;  // service.name, telemetry.sdk.*, OTEL_RESOURCE_ATTRIBUTES
  std::string scopeName = "parley";
  std::string scopeVersion;
};

// One aggregated metric, as the exporter keeps it (cumulative since startNs).
struct MetricSeries {
  std::vector<Attribute> attributes;
  // Histogram: one count per bucket (bounds.size() + 1), the sum, count, min and max.
  std::vector<uint64_t> bucketCounts;
  double sum = 0;
  uint64_t count = 0;
  double min = 0;
  double max = 0;
  int64_t value = 0;  // Sum
};

struct MetricData {
  enum class Kind { Histogram, Counter, UpDownCounter };
  std::string name;
  std::string unit;
  std::string description;
  Kind kind = Kind::Histogram;
  std::vector<double> bounds;  // a histogram's explicit bucket boundaries
  std::vector<MetricSeries> series;
};

std::string encodeTracesProtobuf(const OtlpResource& resource, const std::vector<SpanData>& spans);
std::string encodeTracesJson(const OtlpResource& resource, const std::vector<SpanData>& spans);
std::string encodeMetricsProtobuf(const OtlpResource& resource,
                                  const std::vector<MetricData>& metrics, int64_t startNs,
                                  int64_t nowNs);
std::string encodeMetricsJson(const OtlpResource& resource, const std::vector<MetricData>& metrics,
                              int64_t startNs, int64_t nowNs);

}  // namespace parley::detail
