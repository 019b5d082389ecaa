// Durable runs (worker.hpp) against the in-process mock, on SQLite (a file, synchronous FULL)
// and on PostgreSQL (a throwaway cluster, fsync on). Prints a table; not a Google Benchmark
// loop, because it measures whole runs, percentiles and throughput:
//
//   overhead     one run at a time on a fresh thread, zero-latency model: submit -> completed
//                through the queue (one worker, concurrency 1) against LlmExecutor::execute()
//                of the same prompt with the same store (the in-process engine), same run
//   latency      submit -> the model's request arrives, p50 and p99 (the producer is another
//                RunStore, as another process would be: PostgreSQL wakes the worker by NOTIFY,
//                SQLite polls)
//   throughput   runs/s with 1, 2 and 4 workers (each its own RunStore, concurrency 8) over 64
//                threads, zero-latency model
//   in flight    with a 100 ms model delay, N threads of 20 runs each served by 4 workers of
//                concurrency N/4: runs/s against the ideal N / 100 ms
//
//   peer         (bench/queue/run.sh, beside graphile-worker and DBOS on the same cluster) one
//                worker of 8 slots: runs/s draining N runs submitted beforehand (one thread
//                each), submit -> start (the model's request) p50 and p99 of runs submitted one
//                at a time by another RunStore, and the WAL written per run (submit to
//                completion); one JSON line. PARLEY_BENCH_PG_INFO names the cluster's info file
//                (tests/pg_test_cluster_main.cpp), PARLEY_BENCH_QUEUE_RUNS and
//                PARLEY_BENCH_QUEUE_LATENCY_RUNS the counts (default 2 000 and 300).
//
//   build/bench/worker_bench [sqlite|postgres]... [overhead|throughput|inflight|peer]...
//   (default: everything but peer; --benchmark_list_tests=true lists the parts it would run)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <libpq-fe.h>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/events.hpp"
#include "parley/executor.hpp"
#include "parley/postgres_store.hpp"
#include "parley/run_store.hpp"
#include "parley/worker.hpp"
#include "pg_test_cluster.hpp"
#include "store/postgres_store.hpp"
#include "store/sqlite_store.hpp"

namespace {

using namespace parley;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

struct Engine {
  std::string name;
  std::function<std::shared_ptr<ConversationStore>()> open;  // a new connection to one database
};

// Arrival time of each model request, by the last user message.
struct Arrivals {
  std::mutex mutex;
  std::map<std::string, Clock::time_point> at;
  void record(const nlohmann::json& request) {
    const auto now = Clock::now();
    const auto& body = request["body"];
    if (!body.is_object() || !body.contains("messages")) return;
    std::lock_guard lock(mutex);
    at.emplace(body["messages"].back().value("content", ""), now);
  }
  std::optional<Clock::time_point> of(const std::string& prompt) {
    std::lock_guard lock(mutex);
    auto it = at.find(prompt);
    if (it == at.end()) return std::nullopt;
    return it->second;
  }
};

struct Mock {
  Arrivals arrivals;
  std::unique_ptr<mock::MockServer> server;
  std::shared_ptr<ProfileRegistry> profiles = std::make_shared<ProfileRegistry>();
  explicit Mock(int delayMs) {
    mock::MockOptions options;
    options.script = mock::readScript(R"({"delay_ms": )" + std::to_string(delayMs) +
                                      R"(, "reply": {"content": "Hello {{last_user}}"}})");
    options.threads = 160;
    options.onRequest = [this](const nlohmann::json& r) { arrivals.record(r); };
    server = std::make_unique<mock::MockServer>(options);
    server->start();
    ClientOptions client;
    client.baseUrl = server->baseUrl();
    client.model = "parley-mock";
    client.maxRetries = 0;
    profiles->add("default", client);
  }
};

// `shared`: the workers' RunStore (else each opens its own).
std::vector<std::unique_ptr<Worker>> makeWorkers(const Engine& engine, Mock& mock, int count,
                                                 int concurrency,
                                                 std::shared_ptr<RunStore> shared = nullptr,
                                                 bool start = true) {
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < count; ++i) {
    WorkerOptions o;
    o.workerId = "bench-" + std::to_string(i);
    o.concurrency = concurrency;
    o.profiles = mock.profiles;
    o.defaultProfile = "default";
    workers.push_back(
        std::make_unique<Worker>(shared ? shared : std::make_shared<RunStore>(engine.open()), o));
    if (start) workers.back()->start();
  }
  return workers;
}

std::vector<std::unique_ptr<Worker>> startWorkers(const Engine& engine, Mock& mock, int count,
                                                  int concurrency,
                                                  std::shared_ptr<RunStore> shared = nullptr) {
  return makeWorkers(engine, mock, count, concurrency, std::move(shared));
}

uint64_t completed(const std::vector<std::unique_ptr<Worker>>& workers) {
  uint64_t n = 0;
  for (auto& w : workers)
    n += w->stats().completed;
  return n;
}

// Polls every millisecond: finer polling costs the machine's two cores more than it measures.
void awaitCompleted(const std::vector<std::unique_ptr<Worker>>& workers, uint64_t total) {
  while (completed(workers) < total)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void overheadAndLatency(const Engine& engine) {
  constexpr int kRuns = 200;
  Mock mock(0);
  // The in-process executor, persisting to the same kind of store.
  std::vector<double> executor;
  {
    EventBus bus;
    ExecutorOptions options;
    options.profiles = mock.profiles;
    options.store = engine.open();
    LlmExecutor exec(bus, options);
    for (int i = 0; i < kRuns + 10; ++i) {
      LlmExecutionRequest r;
      r.workflowId = "wf";
      r.threadId = "exec-" + std::to_string(i);
      r.nodeId = "n";
      r.requestData.prompt = "exec " + std::to_string(i);
      r.requestData.profileId = "default";
      const auto start = Clock::now();
      exec.execute(r);
      if (i >= 10) executor.push_back(ms(Clock::now() - start));
      exec.cleanupThread(r.threadId);
    }
  }
  // The producer in another RunStore (as another process), then sharing the worker's (woken at
  // once, on SQLite too: the queue's own cost).
  for (bool sharing : {false, true}) {
    auto workerStore = std::make_shared<RunStore>(engine.open());
    auto producer = sharing ? workerStore : std::make_shared<RunStore>(engine.open());
    auto workers = startWorkers(engine, mock, 1, 1, workerStore);
    std::vector<double> queue, firstRequest;
    const std::string tag = sharing ? "s" : "o";
    for (int i = 0; i < kRuns + 10; ++i) {
      const std::string prompt = "queued " + tag + std::to_string(i);
      const auto start = Clock::now();
      producer->submit("q-" + tag + std::to_string(i), prompt);
      awaitCompleted(workers, static_cast<uint64_t>(i + 1));
      const auto end = Clock::now();
      if (i < 10) continue;  // warm-up
      queue.push_back(ms(end - start));
      if (auto at = mock.arrivals.of(prompt)) firstRequest.push_back(ms(*at - start));
    }
    const char* how = sharing ? "same RunStore" : "other RunStore";
    std::printf(
        "%-9s overhead   (%s) executor p50 %.2f ms | queue p50 %.2f ms p99 %.2f ms | "
        "overhead per run p50 %.2f ms (x%.1f)\n",
        engine.name.c_str(), how, percentile(executor, 0.5), percentile(queue, 0.5),
        percentile(queue, 0.99), percentile(queue, 0.5) - percentile(executor, 0.5),
        percentile(queue, 0.5) / percentile(executor, 0.5));
    std::printf("%-9s latency    (%s) submit -> first model request p50 %.2f ms p99 %.2f ms\n",
                engine.name.c_str(), how, percentile(firstRequest, 0.5),
                percentile(firstRequest, 0.99));
  }
}

void throughput(const Engine& engine) {
  constexpr int kThreads = 64;
  constexpr int kRuns = 1'280;
  for (int count : {1, 2, 4}) {
    Mock mock(0);
    RunStore producer(engine.open());
    const std::string prefix = "tp" + std::to_string(count) + "-";
    for (int i = 0; i < kRuns; ++i)
      producer.submit(prefix + std::to_string(i % kThreads), "run " + std::to_string(i));
    const auto start = Clock::now();
    auto workers = startWorkers(engine, mock, count, 8);
    awaitCompleted(workers, kRuns);
    const double seconds = ms(Clock::now() - start) / 1000;
    std::printf("%-9s throughput %d worker(s) x 8: %.0f runs/s (%d runs in %.2f s)\n",
                engine.name.c_str(), count, kRuns / seconds, kRuns, seconds);
  }
}

// The in-process executor with the same store, N threads of runs at once: the peer.
double executorRate(const Engine& engine, Mock& mock, int n, int runsPerThread) {
  EventBus bus;
  ExecutorOptions options;
  options.profiles = mock.profiles;
  options.store = engine.open();
  options.maxConcurrentThreads = n;
  LlmExecutor exec(bus, options);
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int t = 0; t < n; ++t) {
    clients.emplace_back([&, t] {
      for (int r = 0; r < runsPerThread; ++r) {
        LlmExecutionRequest request;
        request.workflowId = "wf";
        request.threadId = "e" + std::to_string(n) + "-" + std::to_string(t);
        request.nodeId = "n";
        request.requestData.prompt = "run " + std::to_string(r);
        request.requestData.profileId = "default";
        exec.execute(request);
      }
    });
  }
  for (auto& c : clients)
    c.join();
  return n * runsPerThread / (ms(Clock::now() - start) / 1000);
}

void inFlight(const Engine& engine) {
  constexpr int kDelayMs = 100;
  constexpr int kRunsPerThread = 20;
  for (int n : {1, 8, 16, 32, 64}) {
    Mock mock(kDelayMs);
    RunStore producer(engine.open());
    const std::string prefix = "f" + std::to_string(n) + "-";
    for (int r = 0; r < kRunsPerThread; ++r)
      for (int t = 0; t < n; ++t)
        producer.submit(prefix + std::to_string(t), "run " + std::to_string(r));
    const int workers = n >= 4 ? 4 : 1;
    // Opened before the clock starts, as the executor's store is: a worker's connections are
    // made once in its life, not per run.
    auto started = makeWorkers(engine, mock, workers, std::max(1, n / workers), nullptr, false);
    const auto start = Clock::now();
    for (auto& worker : started)
      worker->start();
    awaitCompleted(started, static_cast<uint64_t>(n * kRunsPerThread));
    const double seconds = ms(Clock::now() - start) / 1000;
    started.clear();
    const double rate = n * kRunsPerThread / seconds;
    const double ideal = n * 1000.0 / kDelayMs;
    const double peer = executorRate(engine, mock, n, kRunsPerThread);
    std::printf(
        "%-9s in flight  %2d (100 ms model): queue %.1f runs/s = %.0f %% of ideal %.0f | "
        "executor %.1f runs/s = %.0f %%\n",
        engine.name.c_str(), n, rate, 100 * rate / ideal, ideal, peer, 100 * peer / ideal);
  }
}

int envCount(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::max(1, std::atoi(value)) : fallback;
}

// The server's WAL position in bytes (pg_current_wal_lsn), read over a connection of its own.
double walBytes(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  PGresult* result = PQexec(conn, "SELECT (pg_current_wal_lsn() - '0/0')::float8");
  const bool ok = PQresultStatus(result) == PGRES_TUPLES_OK;
  const double bytes = ok ? std::atof(PQgetvalue(result, 0, 0)) : 0;
  const std::string reason = ok ? "" : PQerrorMessage(conn);
  PQclear(result);
  PQfinish(conn);
  if (!ok) throw std::runtime_error("pg_current_wal_lsn: " + reason);
  return bytes;
}

std::string peerConninfo;  // set by main for the peer part (a connection outside the schema)

void peer(const Engine& engine) {
  if (engine.name != "postgres") throw std::runtime_error("the peer part runs on postgres only");
  const int runs = envCount("PARLEY_BENCH_QUEUE_RUNS", 2'000);
  const int latencyRuns = envCount("PARLEY_BENCH_QUEUE_LATENCY_RUNS", 300);
  Mock mock(0);
  RunStore producer(engine.open());
  const double wal0 = walBytes(peerConninfo);
  for (int i = 0; i < runs; ++i)
    producer.submit("peer-" + std::to_string(i), "run " + std::to_string(i));
  auto workers = makeWorkers(engine, mock, 1, 8, nullptr, false);
  const auto start = Clock::now();
  workers.front()->start();
  awaitCompleted(workers, static_cast<uint64_t>(runs));
  const double seconds = ms(Clock::now() - start) / 1000;
  const double walPerRun = (walBytes(peerConninfo) - wal0) / runs;
  // Submitted one at a time while the worker waits (woken by NOTIFY), each awaited.
  std::vector<double> latency;
  const int warmUp = std::max(3, latencyRuns / 10);
  for (int i = 0; i < latencyRuns + warmUp; ++i) {
    const std::string prompt = "latency " + std::to_string(i);
    const auto submitted = Clock::now();
    producer.submit("lat-" + std::to_string(i), prompt);
    awaitCompleted(workers, static_cast<uint64_t>(runs + i + 1));
    auto at = mock.arrivals.of(prompt);
    if (!at) throw std::runtime_error("the mock saw no request for " + prompt);
    if (i >= warmUp) latency.push_back(ms(*at - submitted));
  }
  std::printf(
      "{\"peer\": \"parley\", \"runs\": %d, \"runs_per_s\": %.1f, \"latency_runs\": %d, "
      "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"wal_bytes_per_run\": %.0f}\n",
      runs, runs / seconds, latencyRuns, percentile(latency, 0.5), percentile(latency, 0.99),
      walPerRun);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> wanted, parts;
  bool list = false;  // --benchmark_list_tests=true, as a Google Benchmark program takes it
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--benchmark_list_tests=true") {
      list = true;
      continue;
    }
    (word == "sqlite" || word == "postgres" ? wanted : parts).push_back(word);
  }
  if (wanted.empty()) wanted = {"sqlite", "postgres"};
  if (parts.empty()) parts = {"overhead", "throughput", "inflight"};
  for (const auto& p : parts) {
    if (p != "overhead" && p != "throughput" && p != "inflight" && p != "peer") {
      std::fprintf(
          stderr,
          "usage: worker_bench [sqlite|postgres]... [overhead|throughput|inflight|peer]...\n");
      return 2;
    }
  }
  if (list) {
    for (const auto& e : wanted)
      for (const auto& p : parts)
        std::printf("%s/%s\n", e.c_str(), p.c_str());
    return 0;
  }
  auto has = [&](const char* p) { return std::find(parts.begin(), parts.end(), p) != parts.end(); };
  const auto dir = std::filesystem::temp_directory_path() / "parley-worker-bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::unique_ptr<testing::PgTestCluster> cluster;
  int databases = 0;
  for (const auto& name : wanted) {
    if (name == "postgres" && !cluster) {
      const char* info = std::getenv("PARLEY_BENCH_PG_INFO");
      cluster = info && *info ? testing::PgTestCluster::attach(info)
                              : testing::PgTestCluster::start({.fsync = true});
      peerConninfo = cluster->conninfo();
    }
    // Each part on a fresh database.
    auto part = [&](void (*fn)(const Engine&)) {
      Engine engine{name, nullptr};
      if (name == "sqlite") {
        const std::string path = (dir / ("b" + std::to_string(databases++) + ".db")).string();
        engine.open = [path]() -> std::shared_ptr<ConversationStore> {
          return std::make_shared<SqliteStore>(path);
        };
      } else {
        const std::string conninfo = cluster->freshSchemaConninfo();
        engine.open = [conninfo]() -> std::shared_ptr<ConversationStore> {
          return std::make_shared<PostgresStore>(conninfo);
        };
      }
      fn(engine);
    };
    if (has("overhead")) part(overheadAndLatency);
    if (has("throughput")) part(throughput);
    if (has("inflight")) part(inFlight);
    if (has("peer")) part(peer);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
