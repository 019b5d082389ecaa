// Store costs (issue 8): per-turn save latency at 10 and 10 000 messages (SQLite with
// synchronous FULL and NORMAL; PostgreSQL over a local socket), load time of a 10 000-message
// thread, fork cost. The peer of a turn is the naive store that rewrites the whole history each
// turn (the full snapshot document as the thread's state); the peer of a fork is a copy
// (export + import).
//   build/bench/store_bench --benchmark_min_time=0.5
// The PostgreSQL figures use a throwaway cluster (fsync on) started by the benchmark itself;
// PARLEY_BENCH_NO_PG=1 skips them.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "parley/conversation_manager.hpp"
#include "parley/postgres_store.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "store_backends.hpp"

namespace {

using namespace parley;
using parley::bench::Backend;
using parley::bench::backends;

Message sample(int64_t i) {
  // ~200 bytes, like a short chat turn.
  std::string text = "message " + std::to_string(i) + ": " + std::string(180, 'x');
  return i % 2 ? Message::user(text) : Message::assistant(text);
}

ConversationManager history(int64_t n) {
  ConversationManager c;
  std::vector<Message> messages;
  for (int64_t i = 0; i < n; ++i)
    messages.push_back(sample(i));
  c.addMessages(std::move(messages));
  return c;
}

// One turn (a user message and the reply) saved with ConversationStore::save.
void saveTurn(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  auto version = saveConversation(*store, "t", manager, 1);
  int64_t i = state.range(0);
  for (auto _ : state) {
    state.PauseTiming();
    manager.addMessage(sample(i++));
    manager.addMessage(sample(i++));
    state.ResumeTiming();
    version = saveConversation(*store, "t", manager, version);
  }
}

// The store's own part of a turn: appendTurn with a state of constant size.
void appendTurn(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"}, manager.getAllMessages());
  ConversationStore::Version version = 1;
  int64_t i = state.range(0);
  const nlohmann::json turnState = {{"markMap", {{"view", {{0, 1}}}}}};
  for (auto _ : state) {
    const Message turn[] = {sample(i), sample(i + 1)};
    i += 2;
    version = store->appendTurn("t", turn, turnState, version);
  }
}

// The naive peer: the whole history rewritten as one document each turn.
void saveWholeHistory(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  ConversationStore::Version version = 1;
  int64_t i = state.range(0);
  for (auto _ : state) {
    state.PauseTiming();
    manager.addMessage(sample(i++));
    manager.addMessage(sample(i++));
    state.ResumeTiming();
    version = store->appendTurn("t", {}, {{"document", manager.createSnapshot()}}, version);
  }
}

void loadThread(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  saveConversation(*store, "t", manager, 1);
  for (auto _ : state) {
    ConversationManager loaded;
    loadConversation(*store, "t", loaded);
    benchmark::DoNotOptimize(loaded);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

// The rows alone, without restoring a manager.
void loadRows(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  saveConversation(*store, "t", manager, 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(store->loadThread("t"));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void forkThread(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  saveConversation(*store, "t", manager, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(store->forkThread("t", state.range(0) / 2));
  }
}

// The peer of a fork: a copy of the thread.
void copyThread(benchmark::State& state, const Backend& backend) {
  auto store = backend.openFresh();
  ConversationManager manager = history(state.range(0));
  store->createThread({.id = "t"});
  saveConversation(*store, "t", manager, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(importThread(*store, exportThread(*store, "t")));
  }
}

void registerAll() {
  for (const Backend& backend : backends()) {
    auto add = [&](const char* what, void (*fn)(benchmark::State&, const Backend&)) {
      return benchmark::RegisterBenchmark((std::string(what) + "/" + backend.name).c_str(),
                                          [backend, fn](benchmark::State& s) { fn(s, backend); });
    };
    // A fixed number of turns, so that the 10-message thread stays short while it is measured.
    add("SaveTurn", saveTurn)
        ->Arg(10)
        ->Arg(10'000)
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(300)
        ->Repetitions(3)
        ->ReportAggregatesOnly(true);
    add("AppendTurn", appendTurn)
        ->Arg(10)
        ->Arg(10'000)
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(300)
        ->Repetitions(3)
        ->ReportAggregatesOnly(true);
    add("SaveWholeHistory", saveWholeHistory)
        ->Arg(10)
        ->Arg(10'000)
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(50);
    add("Load", loadThread)->Arg(10'000)->Unit(benchmark::kMillisecond);
    add("LoadRows", loadRows)->Arg(10'000)->Unit(benchmark::kMillisecond);
    add("Fork", forkThread)->Arg(10'000)->Unit(benchmark::kMicrosecond);
    add("CopyThread", copyThread)->Arg(10'000)->Unit(benchmark::kMillisecond)->Iterations(5);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return parley::bench::runBenchmarks(argc, argv, registerAll);
}
