// The service (src/service/service.hpp, `parley serve`) on SQLite. Prints a table; not a Google
// Benchmark loop, because it measures fan-out to many connections, memory and percentiles:
//
//   fanout    events/s written through the RunStore and delivered to 1, 100 and 1 000 event-stream
//             clients (libcurl multi, one thread), the Service in this process (so its feed is
//             woken by the writes at once); 4 000 events of ~100 bytes in writes of 10 (as a
//             worker's coalesced chunks come); the clients run in this process too, on the same
//             2 cores. The streams written in turns (streamThreads 4, the default) and the
//             peer, a thread per stream (streamThreads 0), three runs each in turn: the medians
//             and their ratio
//   memory    RSS of a `parley serve` process before and after 1 000 idle streams connect, per
//             client; the same with `--stream-threads 0` (a thread per stream)
//   latency   submit (POST /v1/threads/T/runs) -> the first llm_stream_chunk on a stream that was
//             open already, through `parley serve --workers 1` against the zero-latency mock;
//             p50 and p90 of 30
//
//   build/bench/serve_bench [fanout|memory|latency]...   (default: all three)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <sys/resource.h>

#include "child_process.hpp"
#include "http_client.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/run_store.hpp"
#include "parley/store.hpp"
#include "service/service.hpp"
#include "sse_swarm.hpp"
#include "store/sqlite_store.hpp"

namespace {

using namespace parley;
using namespace parley::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

long rssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

long threadsOf(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stol(line.substr(8));
  return 0;
}

// Until the process's thread count has not changed for half a second (at most 10 s): the
// threads that served the streams' requests have ended, and their stacks are not counted.
void settle(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  long last = threadsOf(pid);
  auto since = Clock::now();
  while (Clock::now() < deadline && Clock::now() - since < std::chrono::milliseconds(500)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const long now = threadsOf(pid);
    if (now != last) {
      last = now;
      since = Clock::now();
    }
  }
}

bool streamsOpen(const std::string& base, size_t n) {
  return http("GET", base + "/metrics")
             .body.find("\nparley_stream_clients " + std::to_string(n) + "\n") != std::string::npos;
}

// Events/s of one fan-out to `clients` streams, written by `streamThreads` threads (0: a
// thread per stream).
double fanoutOnce(const fs::path& dir, size_t clients, size_t streamThreads) {
  constexpr int kEvents = 4'000;
  constexpr int kPerWrite = 10;
  {
    static int count = 0;  // a database of its own for each run
    const fs::path db = dir / ("fanout-" + std::to_string(++count) + ".db");
    auto runs = std::make_shared<RunStore>(std::make_shared<SqliteStore>(db.string()));
    ServiceOptions options;
    options.log = [](const std::string&) {};
    options.maxStreams = clients + 10;
    options.streamThreads = streamThreads;
    Service service(runs, options);
    service.start();
    const std::string base = service.baseUrl();
    runs->submit("fan", "x");
    auto claim = runs->claim("bench", std::chrono::minutes(10));
    const int64_t start = runs->readEvents("fan", 0).back().seq;
    SseSwarm swarm("bench_end");
    for (size_t i = 0; i < clients; ++i)
      swarm.add(base + "/v1/threads/fan/events?after=" + std::to_string(start));
    swarm.run(Clock::now() + std::chrono::seconds(60), [&] { return streamsOpen(base, clients); });
    const auto t0 = Clock::now();
    auto writer = std::async(std::launch::async, [&] {
      const std::string text(100, 'x');
      for (int i = 0; i < kEvents; i += kPerWrite) {
        std::vector<EventInput> batch;
        for (int j = 0; j < kPerWrite; ++j)
          batch.push_back(
              {i + j + 1 == kEvents ? "bench_end" : "llm_stream_chunk", {{"content", text}}});
        runs->appendEvents(claim->lease, batch);
      }
    });
    const bool all = swarm.run(Clock::now() + std::chrono::seconds(120));
    const double s = seconds(Clock::now() - t0);
    writer.get();
    size_t complete = 0;
    for (const auto& c : swarm.clients())
      complete += c->ids.size() == static_cast<size_t>(kEvents) ? 1 : 0;
    std::printf("  %8zu %14s %12.0f %16.0f %10.3f%s\n", clients,
                streamThreads ? "in turns" : "thread each", kEvents / s,
                static_cast<double>(kEvents) * static_cast<double>(clients) / s, s,
                all && complete == clients ? "" : "  (INCOMPLETE)");
    return kEvents / s;
  }
}

void fanout(const fs::path& dir) {
  std::printf("fanout: 4000 events (writes of 10) to N clients, Service in-process, SQLite\n");
  std::printf("  %8s %14s %12s %16s %10s\n", "clients", "streams", "events/s", "deliveries/s",
              "seconds");
  // Three runs of each, in turn, and the medians: one run on a shared machine says little.
  constexpr int kRuns = 3;
  for (size_t clients : {size_t{1}, size_t{100}, size_t{1'000}}) {
    std::vector<double> turns;
    std::vector<double> threads;
    for (int run = 0; run < kRuns; ++run) {
      turns.push_back(fanoutOnce(dir, clients, ServiceOptions{}.streamThreads));
      threads.push_back(fanoutOnce(dir, clients, 0));
    }
    std::sort(turns.begin(), turns.end());
    std::sort(threads.begin(), threads.end());
    std::printf(
        "  %8zu medians: streams in turns %.0f events/s, a thread each %.0f: %.2fx the "
        "events/s\n",
        clients, turns[kRuns / 2], threads[kRuns / 2], turns[kRuns / 2] / threads[kRuns / 2]);
  }
}

struct Serve {
  std::unique_ptr<ChildProcess> process;
  std::string base;
};

Serve serve(const fs::path& db, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {PARLEY_CLI_PATH, "serve", "--db", db.string(), "--port", "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Serve s;
  s.process = std::make_unique<ChildProcess>(argv);
  s.base = s.process->readLine().value_or("");
  if (s.base.empty()) throw std::runtime_error("parley serve did not start");
  return s;
}

long memoryOnce(const fs::path& dir, const std::vector<std::string>& extra) {
  constexpr size_t kClients = 1'000;
  Serve s = serve(dir / ("memory" + std::to_string(extra.size()) + ".db"), extra);
  http("POST", s.base + "/v1/threads", json{{"id", "idle"}}.dump());
  const long before = rssKiB(s.process->pid());
  SseSwarm swarm("never");
  for (size_t i = 0; i < kClients; ++i)
    swarm.add(s.base + "/v1/threads/idle/events");
  swarm.run(Clock::now() + std::chrono::seconds(60), [&] { return streamsOpen(s.base, kClients); });
  settle(s.process->pid());
  const long after = rssKiB(s.process->pid());
  std::printf(
      "memory: parley serve%s RSS %ld KiB idle, %ld KiB with %zu idle streams: %ld bytes "
      "per client\n",
      extra.empty() ? "" : " --stream-threads 0", before, after, kClients,
      (after - before) * 1024 / static_cast<long>(kClients));
  s.process->kill(SIGTERM);
  s.process->wait();
  return (after - before) * 1024 / static_cast<long>(kClients);
}

void memory(const fs::path& dir) {
  const long turns = memoryOnce(dir, {});
  const long threads = memoryOnce(dir, {"--stream-threads", "0"});
  std::printf("memory: an idle stream in turns costs %.1fx less than with a thread each\n",
              static_cast<double>(threads) / static_cast<double>(std::max(turns, 1L)));
}

void latency(const fs::path& dir) {
  mock::MockOptions mockOptions;
  mockOptions.script = mock::readScript(R"({"reply": {"content": "first token and more"}})");
  mock::MockServer mock(mockOptions);
  mock.start();
  Serve s = serve(dir / "latency.db", {"--workers", "1", "--base-url", mock.baseUrl(), "--model",
                                       "parley-mock", "--api-key", "k"});
  // One stream stays open on one thread; each run is submitted once the previous one completed.
  http("POST", s.base + "/v1/threads", json{{"id", "lat"}}.dump());
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<std::string, Clock::time_point>> events;  // type, when
  std::atomic<bool> done{false};
  auto reader = std::async(std::launch::async, [&] {
    readSse(
        s.base + "/v1/threads/lat/events",
        [&](const SseEvent& e) {
          std::lock_guard lock(mutex);
          events.emplace_back(e.event, Clock::now());
          arrived.notify_all();
          return !done;
        },
        {}, 600'000);
  });
  while (!streamsOpen(s.base, 1))
    std::this_thread::yield();
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i) {
    size_t seen;
    {
      std::lock_guard lock(mutex);
      seen = events.size();
    }
    const auto t0 = Clock::now();
    http("POST", s.base + "/v1/threads/lat/runs", json{{"input", "go"}}.dump());
    std::unique_lock lock(mutex);
    Clock::time_point firstChunk{};
    arrived.wait(lock, [&] {
      for (size_t j = seen; j < events.size(); ++j) {
        if (events[j].first == "llm_stream_chunk" && firstChunk == Clock::time_point{}) {
          firstChunk = events[j].second;
        }
        if (events[j].first == "run_completed") return true;
      }
      return false;
    });
    ms.push_back(seconds(firstChunk - t0) * 1000);
  }
  done = true;
  http("POST", s.base + "/v1/threads/lat/runs",
       json{{"input", "last"}}.dump());  // wakes the reader
  reader.get();
  std::sort(ms.begin(), ms.end());
  std::printf(
      "latency: submit -> first streamed token through parley serve --workers 1, "
      "zero-latency mock: p50 %.1f ms, p90 %.1f ms, min %.1f ms (30 runs)\n",
      ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.front());
  s.process->kill(SIGTERM);
  s.process->wait();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is measured
  std::vector<std::string> parts;
  bool list = false;  // --benchmark_list_tests=true, as a Google Benchmark program takes it
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--benchmark_list_tests=true") {
      list = true;
    } else if (word == "fanout" || word == "memory" || word == "latency") {
      parts.push_back(word);
    } else {
      std::fprintf(stderr, "usage: serve_bench [fanout|memory|latency]...\n");
      return 2;
    }
  }
  if (parts.empty()) parts = {"fanout", "memory", "latency"};
  if (list) {
    for (const auto& p : parts)
      std::printf("%s\n", p.c_str());
    return 0;
  }
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  const auto dir = fs::temp_directory_path() / ("parley-serve-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const auto& p : parts) {
    if (p == "fanout") fanout(dir);
    if (p == "memory") memory(dir);
    if (p == "latency") latency(dir);
  }
  fs::remove_all(dir);
  return 0;
}
