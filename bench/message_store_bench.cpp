// The message store's costs (issue: foundation): appends per second, role queries that must
// stay flat as the history grows, snapshot and restore, and clone (fork) cost.
//   build/bench/message_store_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"

namespace {

using parley::ConversationManager;
using parley::Message;
using parley::Role;

ConversationManager history(int64_t n) {
  ConversationManager c;
  c.addMessage(Message::system("You are a helpful assistant."));
  for (int64_t i = 1; i < n; ++i) {
    c.addMessage(i % 2 ? Message::user("question number " + std::to_string(i))
                       : Message::assistant("answer number " + std::to_string(i)));
  }
  return c;
}

void BM_AddMessage(benchmark::State& state) {
  const Message m = Message::user("How is the weather in Oslo today?");
  for (auto _ : state) {
    state.PauseTiming();
    ConversationManager c;
    state.ResumeTiming();
    for (int i = 0; i < 10000; ++i)
      c.addMessage(m);
    benchmark::DoNotOptimize(c);
  }
  state.SetItemsProcessed(state.iterations() * 10000);
}
BENCHMARK(BM_AddMessage)->Unit(benchmark::kMillisecond);

void BM_RecentUserMessages(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.getRecentMessagesByRole(Role::User, 3));
}
BENCHMARK(BM_RecentUserMessages)->Arg(1000)->Arg(100000)->Arg(1000000);

void BM_MessageCountByRole(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.getMessageCountByRole(Role::User));
}
BENCHMARK(BM_MessageCountByRole)->Arg(1000)->Arg(1000000);

void BM_CreateSnapshot(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.createSnapshot());
}
BENCHMARK(BM_CreateSnapshot)->Arg(10)->Arg(10000)->Unit(benchmark::kMicrosecond);

// What the executor takes after every request (LlmExecutionCompleted::updatedContext): the
// state frozen, its document built only on demand. Flat in the history's length.
void BM_FrozenSnapshot(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.snapshot());
}
BENCHMARK(BM_FrozenSnapshot)->Arg(10)->Arg(10000)->Unit(benchmark::kMicrosecond);

// Handing a frozen snapshot back (a request's contextSnapshot).
void BM_RestoreFrozenSnapshot(benchmark::State& state) {
  const parley::ContextSnapshot snapshot = history(state.range(0)).snapshot();
  ConversationManager c;
  for (auto _ : state) {
    c.restoreFromSnapshot(snapshot);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_RestoreFrozenSnapshot)->Arg(10)->Arg(10000)->Unit(benchmark::kMicrosecond);

void BM_RestoreSnapshot(benchmark::State& state) {
  const nlohmann::json snapshot = history(state.range(0)).createSnapshot();
  for (auto _ : state) {
    ConversationManager c;
    c.restoreFromSnapshot(snapshot);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(BM_RestoreSnapshot)->Arg(10)->Arg(10000)->Unit(benchmark::kMicrosecond);

void BM_StateSnapshot(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.createStateSnapshot());
}
BENCHMARK(BM_StateSnapshot)->Arg(10)->Arg(10000);

void BM_Clone(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(c.clone());
}
BENCHMARK(BM_Clone)->Arg(10)->Arg(10000)->Arg(100000);

void BM_CloneThenAppend(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  for (auto _ : state) {
    ConversationManager fork = c.clone();
    fork.addMessage(Message::user("a different question"));
    benchmark::DoNotOptimize(fork);
  }
}
BENCHMARK(BM_CloneThenAppend)->Arg(10)->Arg(10000)->Arg(100000);

void BM_TruncateKeepLast(benchmark::State& state) {
  ConversationManager c = history(state.range(0));
  parley::TruncateOp op;
  op.keepLast = 20;
  for (auto _ : state) {
    ConversationManager fork = c.clone();
    benchmark::DoNotOptimize(parley::applyContextOperation(fork, op));
  }
}
BENCHMARK(BM_TruncateKeepLast)->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
