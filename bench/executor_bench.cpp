// Benchmarks of the event-driven executor (issue 6), against an in-process `parley mock` with
// zero latency.
//
//   BM_ManagerRun          the peer: ConversationManager::run() of one prompt on a fresh
//                          conversation (one model call, no events)
//   BM_ExecutorExecute     LlmExecutor::execute() of the same prompt on a fresh thread: the
//                          same model call plus validation, queueing, the pool hop, the events
//                          and the snapshot. The executor's overhead per request is
//                          BM_ExecutorExecute - BM_ManagerRun.
//   BM_ExecutorThroughput/N  N threads publish one request each at once; waitIdle();
//                          requests per second (items_per_second).
//   BM_ExecutorCacheMiss   BM_ExecutorExecute with responseCacheSize set and a prompt never
//                          seen before: every request hashes its body, misses, calls the model
//                          and stores the reply.
//   BM_ExecutorCacheHit    the same with the same prompt on every (fresh) thread: every request
//                          after the first is answered from the cache, without the model.
//   BM_ManagerRunHistory/N, BM_ExecutorExecuteHistory/N
//                          the same two at a history of N messages (10, 1 000, 10 000): the
//                          executor's overhead per request as the thread grows is the
//                          difference. Both send the same N-message request to the mock.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "history.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/executor.hpp"
#include "parley/openai_client.hpp"

namespace {

using namespace parley;

struct Fixture {
  Fixture() {
    // PARLEY_BENCH_MOCK_URL: a mock already serving (`parley mock`), so that two builds of the
    // executor can be timed against one server.
    if (const char* url = std::getenv("PARLEY_BENCH_MOCK_URL")) {
      client.baseUrl = url;
    } else {
      mock::MockOptions options;
      options.script = mock::readScript(R"({"reply": {"content": "Hello {{last_user}}"}})");
      options.threads = 128;
      server = std::make_unique<mock::MockServer>(options);
      server->start();
      client.baseUrl = server->baseUrl();
    }
    client.model = "parley-mock";
    client.maxRetries = 0;
    profiles->add("default", client);
  }
  std::unique_ptr<mock::MockServer> server;
  ClientOptions client;
  std::shared_ptr<ProfileRegistry> profiles = std::make_shared<ProfileRegistry>();
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

LlmExecutionRequest request(const std::string& thread) {
  LlmExecutionRequest r;
  r.workflowId = "wf";
  r.threadId = thread;
  r.nodeId = "n";
  r.requestData.prompt = "hi";
  r.requestData.profileId = "default";
  return r;
}

void BM_ManagerRun(benchmark::State& state) {
  auto& f = fixture();
  ConversationOptions options;
  options.llm = f.profiles->client("default");
  for (auto _ : state) {
    ConversationManager manager(options);
    benchmark::DoNotOptimize(manager.run("hi"));
  }
}
BENCHMARK(BM_ManagerRun)->UseRealTime();

void BM_ExecutorExecute(benchmark::State& state) {
  auto& f = fixture();
  EventBus bus;
  ExecutorOptions options;
  options.profiles = f.profiles;
  LlmExecutor executor(bus, options);
  uint64_t n = 0;
  for (auto _ : state) {
    const std::string thread = "t" + std::to_string(n++);
    benchmark::DoNotOptimize(executor.execute(request(thread)));
    executor.cleanupThread(thread);
  }
}
BENCHMARK(BM_ExecutorExecute)->UseRealTime();

// A conversation of n messages whose request fragments and token counts are cached, as a
// thread's are after its first turn.
ConversationManager warmConversation(int64_t n) {
  ConversationOptions options;
  options.llm = fixture().profiles->client("default");
  ConversationManager manager(options);
  manager.addMessages(bench::historyOf(n));
  manager.run("warm up");
  return manager;
}

void BM_ManagerRunHistory(benchmark::State& state) {
  const ConversationManager base = warmConversation(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    ConversationManager manager = base.clone();
    state.ResumeTiming();
    benchmark::DoNotOptimize(manager.run("hi"));
  }
}
BENCHMARK(BM_ManagerRunHistory)->Arg(10)->Arg(1000)->Arg(10000)->UseRealTime();

void BM_ExecutorExecuteHistory(benchmark::State& state) {
  auto& f = fixture();
  const nlohmann::json snapshot = warmConversation(state.range(0)).createSnapshot();
  EventBus bus;
  ExecutorOptions options;
  options.profiles = f.profiles;
  LlmExecutor executor(bus, options);
  for (auto _ : state) {
    // Untimed: the thread is put back to n messages and given one turn, so that its request
    // fragments are cached as a long-lived thread's are.
    state.PauseTiming();
    auto reset = request("h");
    reset.contextSnapshot = snapshot;
    executor.execute(reset);
    state.ResumeTiming();
    benchmark::DoNotOptimize(executor.execute(request("h")));
  }
}
BENCHMARK(BM_ExecutorExecuteHistory)->Arg(10)->Arg(1000)->Arg(10000)->UseRealTime();

// One request per iteration on a fresh thread with the response cache on; `samePrompt`: every
// request is the same (hits), else each is new (misses).
void executeCached(benchmark::State& state, bool samePrompt) {
  auto& f = fixture();
  EventBus bus;
  ExecutorOptions options;
  options.profiles = f.profiles;
  options.responseCacheSize = 1024;
  LlmExecutor executor(bus, options);
  uint64_t n = 0;
  for (auto _ : state) {
    const std::string thread = "t" + std::to_string(n++);
    auto r = request(thread);
    if (!samePrompt) r.requestData.prompt = "hi " + std::to_string(n);
    benchmark::DoNotOptimize(executor.execute(r));
    executor.cleanupThread(thread);
  }
  const auto stats = executor.responseCacheStats();
  const uint64_t expected = samePrompt ? state.iterations() - 1 : 0;
  if (stats.hits != expected) state.SkipWithError("unexpected cache hits");
  state.counters["hits"] = static_cast<double>(stats.hits);
}

void BM_ExecutorCacheMiss(benchmark::State& state) {
  executeCached(state, false);
}
BENCHMARK(BM_ExecutorCacheMiss)->UseRealTime();

void BM_ExecutorCacheHit(benchmark::State& state) {
  executeCached(state, true);
}
BENCHMARK(BM_ExecutorCacheHit)->UseRealTime();

void BM_ExecutorThroughput(benchmark::State& state) {
  auto& f = fixture();
  const int threads = static_cast<int>(state.range(0));
  EventBus bus;
  ExecutorOptions options;
  options.profiles = f.profiles;
  options.maxConcurrentThreads = threads;
  LlmExecutor executor(bus, options);
  std::atomic<int> failed{0};
  auto sub = bus.subscribe<LlmExecutionFailed>([&](const LlmExecutionFailed&) { ++failed; });
  uint64_t round = 0;
  for (auto _ : state) {
    ++round;
    for (int i = 0; i < threads; ++i)
      bus.publish(request("r" + std::to_string(round) + "-" + std::to_string(i)));
    executor.waitIdle();
    state.PauseTiming();
    for (int i = 0; i < threads; ++i)
      executor.cleanupThread("r" + std::to_string(round) + "-" + std::to_string(i));
    state.ResumeTiming();
  }
  if (failed > 0) state.SkipWithError("requests failed");
  state.SetItemsProcessed(state.iterations() * threads);
}
BENCHMARK(BM_ExecutorThroughput)->Arg(1)->Arg(10)->Arg(100)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
