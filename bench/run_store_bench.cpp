// The run queue's store costs (issue 13), on SQLite (synchronous FULL and NORMAL) and PostgreSQL
// (a throwaway cluster, fsync on, over a local socket):
//   Submit          one run submitted (100 threads in turn)
//   ClaimFinish     claim the oldest run and finish it (two transactions)
//   RunCycle        submit + claim + one fenced whole-turn append + finish: the queue's own cost
//                   per run, what a worker adds to a run besides the model and the tools
//   FencedAppend    a two-message turn through RunStore::appendTurn (lease checked), against
//   PlainAppend     the same turn through ConversationStore::appendTurn: the price of fencing
//   EventAppend     one event under a lease
//   EventRead       the 100 events after a sequence number, in a thread of 10 000
//   SubmitToClaim   from submit() on one store object to claim() returning on another, whose
//                   worker thread waits in waitForRuns (PostgreSQL: NOTIFY; SQLite: polling);
//                   counters p50_us and p99_us
//   build/bench/run_store_bench --benchmark_min_time=0.5
// PARLEY_BENCH_NO_PG=1 leaves PostgreSQL out.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "parley/run_store.hpp"
#include "store_backends.hpp"

namespace {

using namespace parley;
using parley::bench::Backend;
using namespace std::chrono_literals;

// A run store on `database` (a new one when empty).
std::unique_ptr<RunStore> openRuns(const Backend& backend, RunStoreOptions options = {},
                                   std::string database = "") {
  if (database.empty()) database = backend.create();
  return std::make_unique<RunStore>(std::shared_ptr<ConversationStore>(backend.open(database)),
                                    std::move(options));
}

std::string threadName(int64_t i) {
  return "t" + std::to_string(i % 100);
}

void submit(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  int64_t i = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(runs->submit(threadName(i++), "What is the weather in Paris?"));
  state.SetItemsProcessed(state.iterations());
}

void claimFinish(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  int64_t i = 0;
  for (auto _ : state) {
    auto claim = runs->claim("bench", 60s);
    if (!claim) {
      state.PauseTiming();
      for (int k = 0; k < 1'000; ++k)
        runs->submit(threadName(i++), "hello");
      state.ResumeTiming();
      claim = runs->claim("bench", 60s);
    }
    runs->finish(claim->lease, RunStatus::Completed);
  }
  state.SetItemsProcessed(state.iterations());
}

void runCycle(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  std::vector<int64_t> versions(100, 1);
  int64_t i = 0;
  for (auto _ : state) {
    const int64_t n = i++;
    RunInfo run = runs->submit(threadName(n), "hello");
    auto claim = runs->claim("bench", 60s);
    const Message turn[] = {run.input[0], Message::assistant("hi there")};
    versions[n % 100] = runs->appendTurn(claim->lease, turn, nullptr, versions[n % 100]);
    runs->finish(claim->lease, RunStatus::Completed);
  }
  state.SetItemsProcessed(state.iterations());
}

void fencedAppend(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  runs->submit("t", "hello");
  auto claim = runs->claim("bench", std::chrono::hours(1));
  RunStore::Version version = 1;
  for (auto _ : state) {
    const Message turn[] = {Message::user("What is the weather?"), Message::assistant("Sunny.")};
    version = runs->appendTurn(claim->lease, turn, nullptr, version);
  }
}

void plainAppend(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  store->createThread({.id = "t"});
  ConversationStore::Version version = 1;
  for (auto _ : state) {
    const Message turn[] = {Message::user("What is the weather?"), Message::assistant("Sunny.")};
    version = store->appendTurn("t", turn, nullptr, version);
  }
}

void eventAppend(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  runs->submit("t", "hello");
  auto claim = runs->claim("bench", std::chrono::hours(1));
  const EventInput event{"message_added", {{"role", "assistant"}, {"content", "Sunny."}}};
  for (auto _ : state)
    runs->appendEvents(claim->lease, std::span<const EventInput>(&event, 1));
  state.SetItemsProcessed(state.iterations());
}

void eventRead(benchmark::State& state, const Backend& backend) {
  auto runs = openRuns(backend);
  runs->submit("t", "hello");
  auto claim = runs->claim("bench", std::chrono::hours(1));
  std::vector<EventInput> batch(1'000, {"llm_stream_chunk", {{"delta", "some words "}}});
  for (int k = 0; k < 10; ++k)
    runs->appendEvents(claim->lease, batch);
  int64_t after = 0;
  for (auto _ : state) {
    auto events = runs->readEvents("t", after, 100);
    benchmark::DoNotOptimize(events);
    after = (after + 100) % 9'900;
  }
  state.SetItemsProcessed(state.iterations() * 100);
}

void submitToClaim(benchmark::State& state, const Backend& backend) {
  RunStoreOptions options;
  options.pollMin = 1ms;
  options.pollMax = 10ms;
  const std::string database = backend.create();
  auto producer = openRuns(backend, {}, database);
  auto consumer = openRuns(backend, options, database);
  std::mutex mutex;
  std::condition_variable claimed;
  std::chrono::steady_clock::time_point claimedAt;
  uint64_t claims = 0;
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop) {
      auto claim = consumer->claim("worker", 60s);
      if (!claim) {
        consumer->waitForRuns(1s);
        continue;
      }
      const auto at = std::chrono::steady_clock::now();
      consumer->finish(claim->lease, RunStatus::Completed);
      std::lock_guard lock(mutex);
      claimedAt = at;
      ++claims;
      claimed.notify_one();
    }
  });
  consumer->waitForRuns(1ms);  // starts PostgreSQL's listener before the first measurement
  std::vector<double> latencies;
  int64_t i = 0;
  for (auto _ : state) {
    std::unique_lock lock(mutex);
    const uint64_t before = claims;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    producer->submit(threadName(i++), "hello");
    lock.lock();
    claimed.wait(lock, [&] { return claims != before; });
    const double seconds = std::chrono::duration<double>(claimedAt - start).count();
    state.SetIterationTime(seconds);
    latencies.push_back(seconds * 1e6);
  }
  stop = true;
  producer->submit("stop", "wake the worker");
  worker.join();
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    state.counters["p50_us"] = latencies[latencies.size() / 2];
    state.counters["p99_us"] =
        latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)];
  }
}

void registerAll() {
  for (const Backend& backend : parley::bench::backends()) {
    auto add = [&](const char* what, void (*fn)(benchmark::State&, const Backend&)) {
      return benchmark::RegisterBenchmark((std::string(what) + "/" + backend.name).c_str(),
                                          [backend, fn](benchmark::State& s) { fn(s, backend); })
          ->Unit(benchmark::kMicrosecond);
    };
    add("Submit", submit);
    add("ClaimFinish", claimFinish);
    add("RunCycle", runCycle);
    add("FencedAppend", fencedAppend);
    add("PlainAppend", plainAppend);
    add("EventAppend", eventAppend);
    add("EventRead", eventRead);
    add("SubmitToClaim", submitToClaim)->UseManualTime()->Iterations(300);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return parley::bench::runBenchmarks(argc, argv, registerAll);
}
