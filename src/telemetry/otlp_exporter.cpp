#include "parley/otlp.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <iomanip>
#include <locale>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "parley/errors.hpp"
#include "parley/version.hpp"
#include "telemetry/otlp_encode.hpp"

namespace parley {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Caps on what the environment may ask for.
constexpr size_t kMaxQueueSize = size_t{1} << 20;
constexpr size_t kMaxHeaders = 64;
constexpr size_t kMaxEnvValueBytes = 8192;
constexpr int kMaxRetries = 10;
// Series kept per metric: attributes are low-cardinality by the conventions, but a model name
// comes from outside; past this the new series are dropped.
constexpr size_t kMaxSeriesPerMetric = 1000;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return "";
  std::string text(value);
  if (text.size() > kMaxEnvValueBytes) {
    throw ValidationError(name, "is longer than " + std::to_string(kMaxEnvValueBytes) + " bytes");
  }
  return text;
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t'))
    text.remove_suffix(1);
  return std::string(text);
}

std::string percentDecode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      int value = 0;
      auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
      if (ec == std::errc() && end == text.data() + i + 3) {
        out.push_back(static_cast<char>(value));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// "k1=v1,k2=v2" (W3C baggage-like, values percent-encoded): the OTEL_*_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES format.
std::vector<std::pair<std::string, std::string>> keyValueList(const char* variable) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string text = env(variable);
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string_view item = std::string_view(text).substr(start, comma - start);
    start = comma + 1;
    if (trim(item).empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      throw ValidationError(variable, "\"" + trim(item) + "\" is not key=value");
    }
    std::string key = trim(item.substr(0, equals));
    std::string value = percentDecode(trim(item.substr(equals + 1)));
    if (key.empty()) throw ValidationError(variable, "has an empty key");
    for (char c : key + value) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        throw ValidationError(variable, "holds a control character");
      }
    }
    out.emplace_back(std::move(key), std::move(value));
    if (out.size() > kMaxHeaders) {
      throw ValidationError(variable, "has more than " + std::to_string(kMaxHeaders) + " entries");
    }
  }
  return out;
}

bool envTrue(const char* name) {
  std::string value = env(name);
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return trim(value) == "true";
}

template <typename T>
void envNumber(const char* name, T& out, T min, T max) {
  const std::string text = trim(env(name));
  if (text.empty()) return;
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() ||
      value < static_cast<long long>(min) || value > static_cast<long long>(max)) {
    throw ValidationError(name, "must be a whole number from " + std::to_string(min) + " to " +
                                    std::to_string(max) + ", got \"" + text + "\"");
  }
  out = static_cast<T>(value);
}

void envMillis(const char* name, milliseconds& out) {
  int64_t value = out.count();
  envNumber<int64_t>(name, value, 1, 3'600'000);
  out = milliseconds(value);
}

std::string joinPath(std::string base, const char* path) {
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base + path;
}

// The default sender: one POST over libcurl, bounded by `timeout`.
int curlSend(const std::string& url, const std::vector<std::string>& headers,
             const std::string& contentType, const std::string& body, milliseconds timeout) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* easy = curl_easy_init();
  if (!easy) return 0;
  curl_slist* list = nullptr;
  list = curl_slist_append(list, ("Content-Type: " + contentType).c_str());
  list = curl_slist_append(list, "Expect:");
  for (const std::string& line : headers)
    list = curl_slist_append(list, line.c_str());
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  // The reply (an ExportTraceServiceResponse) is not read: only its status matters.
  curl_easy_setopt(
      easy, CURLOPT_WRITEFUNCTION,
      +[](char*, size_t size, size_t count, void*) { return size * count; });
  long status = 0;
  if (curl_easy_perform(easy) == CURLE_OK) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(list);
  curl_easy_cleanup(easy);
  return static_cast<int>(status);
}

// OTLP/HTTP: retry on 429, 502, 503, 504 and when the receiver was not reached.
bool retryable(int status) {
  return status == 0 || status == 429 || status == 502 || status == 503 || status == 504;
}

struct MetricInfo {
  const char* name;
  const char* unit;
  const char* description;
  detail::MetricData::Kind kind;
  const std::vector<double>* bounds;
};

const std::vector<double> kDurationBounds = {0.01, 0.02, 0.04, 0.08,  0.16,  0.32,  0.64,
                                             1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92};
const std::vector<double> kTokenBounds = {
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};

// The metrics parley records (docs/telemetry.md); the buckets are the conventions' advice.
const MetricInfo kMetrics[] = {
    {"gen_ai.client.operation.duration", "s", "GenAI operation duration",
     detail::MetricData::Kind::Histogram, &kDurationBounds},
    {"gen_ai.client.operation.time_to_first_chunk", "s",
     "Time to receive the first chunk from a streaming response",
     detail::MetricData::Kind::Histogram, &kDurationBounds},
    {"gen_ai.client.token.usage", "{token}", "Number of input and output tokens used",
     detail::MetricData::Kind::Histogram, &kTokenBounds},
    {"parley.run.claim.latency", "s", "Time from a run's submit to its claim by a worker",
     detail::MetricData::Kind::Histogram, &kDurationBounds},
    {"parley.run.queue.depth", "{run}",
     "Runs queued and not yet claimed, as a service last read the queue",
     detail::MetricData::Kind::UpDownCounter, nullptr},
    {"parley.run.claims", "{run}", "Runs claimed by this process's workers",
     detail::MetricData::Kind::Counter, nullptr},
    {"parley.run.lease.takeovers", "{run}",
     "Runs claimed again after another worker's lease on them expired",
     detail::MetricData::Kind::Counter, nullptr},
};

const MetricInfo* metricInfo(std::string_view name) {
  for (const MetricInfo& info : kMetrics)
    if (name == info.name) return &info;
  return nullptr;
}

// A series' key: its attributes, in order, as text.
std::string seriesKey(const std::vector<Attribute>& attributes) {
  std::string key;
  for (const Attribute& a : attributes) {
    key += a.key;
    key += '\x1f';
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            key += v;
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const std::string& s : v)
              key += s + '\x1d';
          } else {
            key += std::to_string(v);
          }
        },
        a.value);
    key += '\x1e';
  }
  return key;
}

}  // namespace

namespace {

// A Prometheus name: dots and other characters Prometheus does not take become underscores.
std::string prometheusName(std::string_view name) {
  std::string out;
  for (char c : name)
    out.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' ? c : '_');
  return out;
}

std::string labelValue(const AttributeValue& value) {
  std::string text = std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string joined;
          for (const std::string& s : v)
            joined += (joined.empty() ? "" : ",") + s;
          return joined;
        } else {
          return std::to_string(v);
        }
      },
      value);
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string labels(const std::vector<Attribute>& attributes, const std::string& extra = "") {
  std::string out;
  for (const Attribute& a : attributes)
    out += (out.empty() ? "" : ",") + prometheusName(a.key) + "=\"" + labelValue(a.value) + "\"";
  if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
  return out.empty() ? "" : "{" + out + "}";
}

std::string number(double value) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << std::setprecision(17) << value;
  return out.str();
}

}  // namespace

bool TelemetryOptions::active() const noexcept {
  return !disabled && (send || !endpoint.empty() || !tracesEndpoint.empty());
}

TelemetryOptions TelemetryOptions::fromEnvironment(const Logger& log) {
  TelemetryOptions o;
  o.disabled = envTrue("OTEL_SDK_DISABLED");
  o.endpoint = trim(env("OTEL_EXPORTER_OTLP_ENDPOINT"));
  o.tracesEndpoint = trim(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
  o.metricsEndpoint = trim(env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"));
  for (const char* variable : {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
    for (auto& [name, value] : keyValueList(variable))
      o.headers.push_back(name + ": " + value);
  }
  std::string protocol = trim(env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"));
  if (protocol.empty()) protocol = trim(env("OTEL_EXPORTER_OTLP_PROTOCOL"));
  if (protocol == "http/json") {
    o.encoding = Encoding::Json;
  } else if (!protocol.empty() && protocol != "http/protobuf") {
    writeLog(log, "telemetry: OTEL_EXPORTER_OTLP_PROTOCOL \"" + protocol +
                      "\" is not supported; parley exports http/protobuf");
  }
  o.resourceAttributes = keyValueList("OTEL_RESOURCE_ATTRIBUTES");
  for (const auto& [key, value] : o.resourceAttributes)
    if (key == "service.name") o.serviceName = value;
  if (std::string name = trim(env("OTEL_SERVICE_NAME")); !name.empty()) o.serviceName = name;
  o.captureContent = envTrue("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
  envNumber<size_t>("OTEL_BSP_MAX_QUEUE_SIZE", o.maxQueueSize, 1, kMaxQueueSize);
  envNumber<size_t>("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", o.maxExportBatchSize, 1, kMaxQueueSize);
  envMillis("OTEL_BSP_SCHEDULE_DELAY", o.scheduleDelay);
  envMillis("OTEL_EXPORTER_OTLP_TIMEOUT", o.exportTimeout);
  envMillis("OTEL_METRIC_EXPORT_INTERVAL", o.metricInterval);
  return o;
}

struct OtlpExporter::State {
  TelemetryOptions options;
  Logger log;
  detail::OtlpResource resource;
  std::string tracesUrl;
  std::string metricsUrl;
  int64_t startNs = nowNs();

  mutable std::mutex mutex;
  std::condition_variable wake;      // the thread: work, a flush or the stop
  std::condition_variable progress;  // flush(): a batch was handled
  std::deque<SpanData> queue;
  uint64_t enqueued = 0;  // spans ever queued (or dropped); flush() waits for `handled` to reach it
  uint64_t handled = 0;
  uint64_t flushRequests = 0;
  uint64_t metricFlushesDone = 0;  // flush requests handled (spans and metrics sent)
  bool stopping = false;
  TelemetryStats stats;

  std::mutex metricsMutex;
  std::map<std::string, detail::MetricData> metrics;
  std::map<std::string, std::map<std::string, size_t>> seriesIndex;
  bool metricsDirty = false;

  // The series of metric `name` with `attributes`, both made on first use: a histogram, or a
  // counter of the kind the table of known metrics gives (a counter when it says histogram).
  // Null when the metric is of the other family, when a monotonic counter is given a
  // `negative` delta, or when it holds kMaxSeriesPerMetric series already. metricsMutex held.
  detail::MetricSeries* seriesOf(std::string_view name, const std::vector<Attribute>& attributes,
                                 bool histogram, bool negative, detail::MetricData*& metric) {
    using Kind = detail::MetricData::Kind;
    auto [it, added] = metrics.try_emplace(std::string(name));
    detail::MetricData& m = it->second;
    if (added) {
      const MetricInfo* info = metricInfo(name);
      m.name = std::string(name);
      m.unit = info ? info->unit : "";
      m.description = info ? info->description : "";
      if (histogram) {
        m.kind = Kind::Histogram;
        m.bounds = info && info->bounds ? *info->bounds : kDurationBounds;
      } else {
        m.kind = info && info->kind != Kind::Histogram ? info->kind : Kind::Counter;
      }
    }
    if ((m.kind == Kind::Histogram) != histogram) return nullptr;
    if (m.kind == Kind::Counter && negative) return nullptr;
    auto& index = seriesIndex[m.name];
    auto [slot, fresh] = index.try_emplace(seriesKey(attributes), m.series.size());
    if (fresh) {
      if (m.series.size() >= kMaxSeriesPerMetric) {
        index.erase(slot);
        return nullptr;
      }
      detail::MetricSeries series;
      series.attributes = attributes;
      if (histogram) series.bucketCounts.assign(m.bounds.size() + 1, 0);
      m.series.push_back(std::move(series));
    }
    metric = &m;
    return &m.series[slot->second];
  }

  std::thread thread;

  int post(const std::string& url, const std::string& body) {
    const std::string type = options.encoding == TelemetryOptions::Encoding::Json
                                 ? "application/json"
                                 : "application/x-protobuf";
    if (options.send) return options.send(url, type, body);
    return curlSend(url, options.headers, type, body, options.exportTimeout);
  }

  // One post with its retries; false when it was given up on. Never waits past a stop request.
  bool postWithRetries(const std::string& url, const std::string& body) {
    static thread_local std::mt19937 jitter{std::random_device{}()};
    milliseconds delay = options.retryDelay;
    for (int attempt = 0;; ++attempt) {
      const int status = post(url, body);
      if (status >= 200 && status < 300) return true;
      std::unique_lock lock(mutex);
      if (!retryable(status) || attempt >= options.maxRetries || stopping) {
        ++stats.exportFailures;
        if (attempt == 0 || !retryable(status)) {
          writeLog(log, "telemetry: the OTLP receiver at " + url + " answered " +
                            (status ? std::to_string(status) : std::string("nothing")) +
                            "; the batch is dropped");
        }
        return false;
      }
      ++stats.retries;
      // Exponential backoff with up to 25 % less, so that exporters restarted together spread.
      const auto wait = delay - milliseconds(std::uniform_int_distribution<int64_t>(
                                    0, delay.count() / 4)(jitter));
      wake.wait_for(lock, wait, [&] { return stopping; });
      delay = std::min(delay * 2, milliseconds(30'000));
    }
  }

  // false when the batch was given up on.
  bool exportSpans(std::vector<SpanData>& batch) {
    if (batch.empty()) return true;
    const std::string body = options.encoding == TelemetryOptions::Encoding::Json
                                 ? detail::encodeTracesJson(resource, batch)
                                 : detail::encodeTracesProtobuf(resource, batch);
    const bool ok = tracesUrl.empty() || postWithRetries(tracesUrl, body);
    std::lock_guard lock(mutex);
    (ok ? stats.spansExported : stats.spansDropped) += batch.size();
    handled += batch.size();
    progress.notify_all();
    return ok;
  }

  void exportMetrics() {
    std::vector<detail::MetricData> snapshot;
    {
      std::lock_guard lock(metricsMutex);
      if (!metricsDirty) return;
      for (const auto& [name, data] : metrics)
        snapshot.push_back(data);
    }
    if (metricsUrl.empty() || snapshot.empty()) return;
    const std::string body =
        options.encoding == TelemetryOptions::Encoding::Json
            ? detail::encodeMetricsJson(resource, snapshot, startNs, nowNs())
            : detail::encodeMetricsProtobuf(resource, snapshot, startNs, nowNs());
    if (postWithRetries(metricsUrl, body)) {
      std::lock_guard lock(mutex);
      ++stats.metricExports;
    }
  }

  void run() {
    auto nextMetrics = Clock::now() + options.metricInterval;
    std::unique_lock lock(mutex);
    for (;;) {
      const auto due = Clock::now() + options.scheduleDelay;
      wake.wait_until(lock, std::min(due, nextMetrics), [&] {
        return stopping || flushRequests != metricFlushesDone ||
               queue.size() >= options.maxExportBatchSize;
      });
      const uint64_t flushTarget = flushRequests;
      const bool flushing = flushTarget != metricFlushesDone || stopping;
      // Every span queued now goes out in batches; the lock is let go while posting.
      while (!queue.empty()) {
        std::vector<SpanData> batch;
        const size_t n = std::min(queue.size(), options.maxExportBatchSize);
        batch.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue.front()));
          queue.pop_front();
        }
        lock.unlock();
        const bool sent = exportSpans(batch);
        lock.lock();
        if (!sent && stopping) {
          // Shutting down and the receiver fails: the rest is dropped rather than waited for.
          stats.spansDropped += queue.size();
          handled += queue.size();
          queue.clear();
        }
      }
      if (flushing || Clock::now() >= nextMetrics) {
        lock.unlock();
        exportMetrics();
        lock.lock();
        nextMetrics = Clock::now() + options.metricInterval;
        metricFlushesDone = flushTarget;
        progress.notify_all();
      }
      if (stopping) return;
    }
  }
};

OtlpExporter::OtlpExporter(TelemetryOptions options, Logger log)
    : state_(std::make_shared<State>()) {
  if (options.maxQueueSize < 1 || options.maxQueueSize > kMaxQueueSize) {
    throw ValidationError("telemetry.maxQueueSize",
                          "must be from 1 to " + std::to_string(kMaxQueueSize));
  }
  if (options.maxExportBatchSize < 1) {
    throw ValidationError("telemetry.maxExportBatchSize", "must be at least 1");
  }
  if (options.exportTimeout.count() <= 0 || options.scheduleDelay.count() <= 0 ||
      options.metricInterval.count() <= 0 || options.retryDelay.count() < 0) {
    throw ValidationError("telemetry", "timeouts and delays must be positive");
  }
  if (options.maxRetries < 0 || options.maxRetries > kMaxRetries) {
    throw ValidationError("telemetry.maxRetries",
                          "must be from 0 to " + std::to_string(kMaxRetries));
  }
  State& s = *state_;
  s.tracesUrl = !options.tracesEndpoint.empty() ? options.tracesEndpoint
                : !options.endpoint.empty()     ? joinPath(options.endpoint, "/v1/traces")
                                                : std::string();
  s.metricsUrl = !options.metricsEndpoint.empty() ? options.metricsEndpoint
                 : !options.endpoint.empty()      ? joinPath(options.endpoint, "/v1/metrics")
                                                  : std::string();
  if (options.send && s.tracesUrl.empty()) s.tracesUrl = "/v1/traces";
  if (options.send && s.metricsUrl.empty()) s.metricsUrl = "/v1/metrics";
  s.resource.attributes.push_back({"service.name", options.serviceName});
  s.resource.attributes.push_back({"telemetry.sdk.name", std::string("parley")});
  s.resource.attributes.push_back({"telemetry.sdk.language", std::string("cpp")});
  s.resource.attributes.push_back({"telemetry.sdk.version", std::string(kVersion)});
  for (const auto& [key, value] : options.resourceAttributes)
    if (key != "service.name") s.resource.attributes.push_back({key, value});
  s.resource.scopeVersion = kVersion;
  s.options = std::move(options);
  s.log = std::move(log);
  s.thread = std::thread([state = state_.get()] { state->run(); });
}

OtlpExporter::~OtlpExporter() {
  shutdown();
}

void OtlpExporter::exportSpan(SpanData&& span) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  ++s.enqueued;
  if (s.stopping || s.queue.size() >= s.options.maxQueueSize) {
    ++s.stats.spansDropped;
    ++s.handled;
    return;
  }
  try {
    s.queue.push_back(std::move(span));
  } catch (...) {
    ++s.stats.spansDropped;
    ++s.handled;
    return;
  }
  if (s.queue.size() >= s.options.maxExportBatchSize) s.wake.notify_one();
}

void OtlpExporter::recordHistogram(std::string_view name, double value,
                                   const std::vector<Attribute>& attributes) noexcept {
  State& s = *state_;
  try {
    std::lock_guard lock(s.metricsMutex);
    detail::MetricData* m = nullptr;
    detail::MetricSeries* series = s.seriesOf(name, attributes, true, false, m);
    if (!series) return;
    if (series->count == 0) series->min = series->max = value;
    const size_t bucket = static_cast<size_t>(
        std::lower_bound(m->bounds.begin(), m->bounds.end(), value) - m->bounds.begin());
    ++series->bucketCounts[bucket];
    series->sum += value;
    ++series->count;
    series->min = std::min(series->min, value);
    series->max = std::max(series->max, value);
    s.metricsDirty = true;
  } catch (...) {  // a measurement lost to memory pressure is not worth a turn
  }
}

void OtlpExporter::addCounter(std::string_view name, int64_t delta,
                              const std::vector<Attribute>& attributes) noexcept {
  State& s = *state_;
  try {
    std::lock_guard lock(s.metricsMutex);
    detail::MetricData* m = nullptr;
    detail::MetricSeries* series = s.seriesOf(name, attributes, false, delta < 0, m);
    if (!series) return;
    series->value += delta;
    s.metricsDirty = true;
  } catch (...) {
  }
}

bool OtlpExporter::captureContent() const noexcept {
  return state_->options.captureContent;
}

bool OtlpExporter::flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.stopping) return s.queue.empty();
  const uint64_t target = s.enqueued;
  const uint64_t request = ++s.flushRequests;
  s.wake.notify_one();
  return s.progress.wait_for(lock, timeout,
                             [&] { return s.handled >= target && s.metricFlushesDone >= request; });
}

void OtlpExporter::shutdown() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    if (s.stopping) return;
    s.stopping = true;
  }
  s.wake.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

TelemetryStats OtlpExporter::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

std::string OtlpExporter::prometheusText() const {
  std::vector<detail::MetricData> snapshot;
  {
    std::lock_guard lock(state_->metricsMutex);
    for (const auto& [name, data] : state_->metrics)
      snapshot.push_back(data);
  }
  std::string out;
  for (const detail::MetricData& m : snapshot) {
    std::string name = prometheusName(m.name);
    if (m.unit == "s") name += "_seconds";
    const bool counter = m.kind == detail::MetricData::Kind::Counter;
    if (counter) name += "_total";
    const char* type = m.kind == detail::MetricData::Kind::Histogram ? "histogram"
                       : counter                                     ? "counter"
                                                                     : "gauge";
    out += "# HELP " + name + " " + (m.description.empty() ? m.name : m.description) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const detail::MetricSeries& s : m.series) {
      if (m.kind != detail::MetricData::Kind::Histogram) {
        out += name + labels(s.attributes) + " " + std::to_string(s.value) + "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < m.bounds.size(); ++i) {
        cumulative += s.bucketCounts[i];
        out += name + "_bucket" + labels(s.attributes, "le=\"" + number(m.bounds[i]) + "\"") + " " +
               std::to_string(cumulative) + "\n";
      }
      out += name + "_bucket" + labels(s.attributes, "le=\"+Inf\"") + " " +
             std::to_string(s.count) + "\n";
      out += name + "_sum" + labels(s.attributes) + " " + number(s.sum) + "\n";
      out += name + "_count" + labels(s.attributes) + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

const TelemetryOptions& OtlpExporter::options() const noexcept {
  return state_->options;
}

std::shared_ptr<OtlpExporter> installTelemetryFromEnvironment(const Logger& log) {
  TelemetryOptions options = TelemetryOptions::fromEnvironment(log);
  if (!options.active()) return nullptr;
  auto exporter = std::make_shared<OtlpExporter>(std::move(options), log);
  setTelemetry(exporter);
  return exporter;
}

}  // namespace parley
