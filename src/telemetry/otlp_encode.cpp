#include "telemetry/otlp_encode.hpp"

#include <cstring>
#include <type_traits>
#include <variant>

#include <simdjson.h>
#include <nlohmann/json.hpp>

namespace parley::detail {

namespace {

using nlohmann::json;

// --- protobuf -------------------------------------------------------------------------------
// Field numbers from opentelemetry-proto (trace.proto, metrics.proto, common.proto,
// resource.proto, the collector's *_service.proto).

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

class Proto {
 public:
  std::string out;

  void varint(uint64_t value) {
    while (value >= 0x80) {
      out.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    out.push_back(static_cast<char>(value));
  }
  void tag(uint32_t field, WireType type) { varint(uint64_t{field} << 3 | type); }
  void uint(uint32_t field, uint64_t value) {
    if (value == 0) return;  // proto3: a default value is not written
    tag(field, kVarint);
    varint(value);
  }
  void fixed64(uint32_t field, uint64_t value) {
    tag(field, kFixed64);
    for (int i = 0; i < 8; ++i)
      out.push_back(static_cast<char>(value >> (8 * i)));
  }
  void fixed32(uint32_t field, uint32_t value) {
    tag(field, kFixed32);
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<char>(value >> (8 * i)));
  }
  void dbl(uint32_t field, double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    fixed64(field, bits);
  }
  void bytes(uint32_t field, std::string_view value) {
    tag(field, kLength);
    varint(value.size());
    out.append(value);
  }
  // A protobuf string must be UTF-8 (a collector refuses the whole request otherwise): bad bytes
  // become U+FFFD, as the JSON encoding's dump does.
  void text(uint32_t field, std::string_view value) {
    if (simdjson::validate_utf8(value.data(), value.size())) return bytes(field, value);
    const std::string quoted =
        json(std::string(value)).dump(-1, ' ', false, json::error_handler_t::replace);
    bytes(field, json::parse(quoted).get<std::string>());
  }
  void string(uint32_t field, std::string_view value) {
    if (!value.empty()) text(field, value);
  }
  template <size_t N>
  void id(uint32_t field, const std::array<uint8_t, N>& value) {
    bytes(field, std::string_view(reinterpret_cast<const char*>(value.data()), N));
  }
  // A nested message: written by `fill` into its own buffer, then length-prefixed.
  template <typename F>
  void message(uint32_t field, F&& fill) {
    Proto nested;
    fill(nested);
    bytes(field, nested.out);
  }
};

void anyValue(Proto& p, const AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          p.text(1, v);  // written even when empty: it is the oneof's choice
        } else if constexpr (std::is_same_v<T, bool>) {
          p.tag(2, kVarint);
          p.varint(v ? 1 : 0);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          p.tag(3, kVarint);
          p.varint(static_cast<uint64_t>(v));
        } else if constexpr (std::is_same_v<T, double>) {
          p.dbl(4, v);
        } else {
          p.message(5, [&](Proto& array) {  // ArrayValue
            for (const std::string& item : v)
              array.message(1, [&](Proto& any) { any.text(1, item); });
          });
        }
      },
      value);
}

void keyValues(Proto& p, uint32_t field, const std::vector<Attribute>& attributes) {
  for (const Attribute& a : attributes) {
    p.message(field, [&](Proto& kv) {
      kv.string(1, a.key);
      kv.message(2, [&](Proto& any) { anyValue(any, a.value); });
    });
  }
}

void resourceAndScope(Proto& p, const OtlpResource& resource) {
  p.message(1, [&](Proto& r) { keyValues(r, 1, resource.attributes); });
}

void scope(Proto& p, const OtlpResource& resource) {
  p.message(1, [&](Proto& s) {
    s.string(1, resource.scopeName);
    s.string(2, resource.scopeVersion);
  });
}

// --- JSON -----------------------------------------------------------------------------------

json anyJson(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return {{"stringValue", v}};
        } else if constexpr (std::is_same_v<T, bool>) {
          return {{"boolValue", v}};
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return {{"intValue", std::to_string(v)}};  // int64 is a string in OTLP JSON
        } else if constexpr (std::is_same_v<T, double>) {
          return {{"doubleValue", v}};
        } else {
          json values = json::array();
          for (const std::string& item : v)
            values.push_back({{"stringValue", item}});
          return {{"arrayValue", {{"values", std::move(values)}}}};
        }
      },
      value);
}

json attributesJson(const std::vector<Attribute>& attributes) {
  json out = json::array();
  for (const Attribute& a : attributes)
    out.push_back({{"key", a.key}, {"value", anyJson(a.value)}});
  return out;
}

template <size_t N>
std::string hexId(const std::array<uint8_t, N>& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * N, '0');
  for (size_t i = 0; i < N; ++i) {
    out[2 * i] = kHex[id[i] >> 4];
    out[2 * i + 1] = kHex[id[i] & 0xF];
  }
  return out;
}

template <size_t N>
bool zero(const std::array<uint8_t, N>& id) {
  for (uint8_t b : id)
    if (b) return false;
  return true;
}

// Span.flags: the W3C flags, and whether the parent is remote (SpanFlags).
uint32_t spanFlags(const SpanData& s) {
  return s.context.flags | 0x100u | (s.parentRemote ? 0x200u : 0u);
}

json resourceJson(const OtlpResource& resource) {
  return {{"attributes", attributesJson(resource.attributes)}};
}

json scopeJson(const OtlpResource& resource) {
  json scope = {{"name", resource.scopeName}};
  if (!resource.scopeVersion.empty()) scope["version"] = resource.scopeVersion;
  return scope;
}

}  // namespace

std::string encodeTracesProtobuf(const OtlpResource& resource, const std::vector<SpanData>& spans) {
  Proto request;                       // ExportTraceServiceRequest
  request.message(1, [&](Proto& rs) {  // ResourceSpans
    resourceAndScope(rs, resource);
    rs.message(2, [&](Proto& ss) {  // ScopeSpans
      scope(ss, resource);
      for (const SpanData& s : spans) {
        ss.message(2, [&](Proto& span) {
          span.id(1, s.context.traceId);
          span.id(2, s.context.spanId);
          span.string(3, s.context.traceState);
          if (!zero(s.parentId)) span.id(4, s.parentId);
          span.string(5, s.name);
          span.uint(6, static_cast<uint64_t>(s.kind));
          span.fixed64(7, static_cast<uint64_t>(s.startNs));
          span.fixed64(8, static_cast<uint64_t>(s.endNs));
          keyValues(span, 9, s.attributes);
          if (s.error) {
            span.message(15, [&](Proto& status) {
              status.string(2, s.statusMessage);
              status.uint(3, 2);  // STATUS_CODE_ERROR
            });
          }
          span.fixed32(16, spanFlags(s));
        });
      }
    });
  });
  return std::move(request.out);
}

std::string encodeTracesJson(const OtlpResource& resource, const std::vector<SpanData>& spans) {
  json list = json::array();
  for (const SpanData& s : spans) {
    json span = {{"traceId", hexId(s.context.traceId)},
                 {"spanId", hexId(s.context.spanId)},
                 {"name", s.name},
                 {"kind", static_cast<int>(s.kind)},
                 {"startTimeUnixNano", std::to_string(s.startNs)},
                 {"endTimeUnixNano", std::to_string(s.endNs)},
                 {"attributes", attributesJson(s.attributes)},
                 {"flags", spanFlags(s)}};
    if (!s.context.traceState.empty()) span["traceState"] = s.context.traceState;
    if (!zero(s.parentId)) span["parentSpanId"] = hexId(s.parentId);
    if (s.error) span["status"] = {{"code", 2}, {"message", s.statusMessage}};
    list.push_back(std::move(span));
  }
  json body = {{"resourceSpans",
                json::array({{{"resource", resourceJson(resource)},
                              {"scopeSpans", json::array({{{"scope", scopeJson(resource)},
                                                           {"spans", std::move(list)}}})}}})}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string encodeMetricsProtobuf(const OtlpResource& resource,
                                  const std::vector<MetricData>& metrics, int64_t startNs,
                                  int64_t nowNs) {
  Proto request;                       // ExportMetricsServiceRequest
  request.message(1, [&](Proto& rm) {  // ResourceMetrics
    resourceAndScope(rm, resource);
    rm.message(2, [&](Proto& sm) {  // ScopeMetrics
      scope(sm, resource);
      for (const MetricData& m : metrics) {
        sm.message(2, [&](Proto& metric) {
          metric.string(1, m.name);
          metric.string(2, m.description);
          metric.string(3, m.unit);
          if (m.kind == MetricData::Kind::Histogram) {
            metric.message(9, [&](Proto& h) {
              for (const MetricSeries& s : m.series) {
                h.message(1, [&](Proto& point) {  // HistogramDataPoint
                  keyValues(point, 9, s.attributes);
                  point.fixed64(2, static_cast<uint64_t>(startNs));
                  point.fixed64(3, static_cast<uint64_t>(nowNs));
                  point.fixed64(4, s.count);
                  point.dbl(5, s.sum);
                  for (uint64_t c : s.bucketCounts)
                    point.fixed64(6, c);
                  for (double b : m.bounds)
                    point.dbl(7, b);
                  if (s.count) {
                    point.dbl(11, s.min);
                    point.dbl(12, s.max);
                  }
                });
              }
              h.uint(2, 2);  // AGGREGATION_TEMPORALITY_CUMULATIVE
            });
          } else {
            metric.message(7, [&](Proto& sum) {
              for (const MetricSeries& s : m.series) {
                sum.message(1, [&](Proto& point) {  // NumberDataPoint
                  keyValues(point, 7, s.attributes);
                  point.fixed64(2, static_cast<uint64_t>(startNs));
                  point.fixed64(3, static_cast<uint64_t>(nowNs));
                  point.fixed64(6, static_cast<uint64_t>(s.value));  // as_int, sfixed64
                });
              }
              sum.uint(2, 2);
              sum.uint(3, m.kind == MetricData::Kind::Counter ? 1 : 0);
            });
          }
        });
      }
    });
  });
  return std::move(request.out);
}

std::string encodeMetricsJson(const OtlpResource& resource, const std::vector<MetricData>& metrics,
                              int64_t startNs, int64_t nowNs) {
  json list = json::array();
  for (const MetricData& m : metrics) {
    json metric = {{"name", m.name}, {"unit", m.unit}};
    if (!m.description.empty()) metric["description"] = m.description;
    json points = json::array();
    for (const MetricSeries& s : m.series) {
      json point = {{"attributes", attributesJson(s.attributes)},
                    {"startTimeUnixNano", std::to_string(startNs)},
                    {"timeUnixNano", std::to_string(nowNs)}};
      if (m.kind == MetricData::Kind::Histogram) {
        point["count"] = std::to_string(s.count);
        point["sum"] = s.sum;
        json counts = json::array();
        for (uint64_t c : s.bucketCounts)
          counts.push_back(std::to_string(c));
        point["bucketCounts"] = std::move(counts);
        point["explicitBounds"] = m.bounds;
        if (s.count) {
          point["min"] = s.min;
          point["max"] = s.max;
        }
      } else {
        point["asInt"] = std::to_string(s.value);
      }
      points.push_back(std::move(point));
    }
    if (m.kind == MetricData::Kind::Histogram) {
      metric["histogram"] = {{"dataPoints", std::move(points)}, {"aggregationTemporality", 2}};
    } else {
      metric["sum"] = {{"dataPoints", std::move(points)},
                       {"aggregationTemporality", 2},
                       {"isMonotonic", m.kind == MetricData::Kind::Counter}};
    }
    list.push_back(std::move(metric));
  }
  json body = {{"resourceMetrics",
                json::array({{{"resource", resourceJson(resource)},
                              {"scopeMetrics", json::array({{{"scope", scopeJson(resource)},
                                                             {"metrics", std::move(list)}}})}}})}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace parley::detail
