// The library's own cost per loop iteration and per fork (issues: the tool loop, the facade).
//   build/bench/conversation_bench --benchmark_min_time=0.3
//
// BM_LoopIteration: one executeLlmCall against an in-process client that builds the real request
// body (as OpenAiClient does) and answers at once, so what is measured is everything except the
// network and the model. The peer, BM_NaiveRequestBody, serialises the whole history with
// nlohmann on every turn, as a library without per-message caching does.
// BM_CacheDiagnostic: diagnoseCache() for the same call, to set against BM_LoopIteration.
// BM_RunToolTurn: one run() of a whole tool turn (model, in-process tool, model) with the same
// client, at the same history lengths: the cost of the tool loop itself.
// BM_Duplicate / BM_ForkMemory: the facade's duplicate() at growing histories, and the bytes
// 1 000 forks cost, against deep copies of the history.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include "client/request_body.hpp"
#include "history.hpp"
#include "parley/ai.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/openai_client.hpp"

namespace {

using namespace parley;
using bench::historyOf;

class InstantClient : public LlmClient {
 public:
  ChatResult generate(const ChatRequest& request) override {
    std::string body = detail::buildRequestBody(request, options_, request.stream);
    benchmark::DoNotOptimize(body.data());
    ChatResult result;
    result.message = Message::assistant("The answer is forty-two.");
    result.finishReason = "stop";
    result.usage = TokenUsage{
        static_cast<int64_t>(body.size() / 4), 6, static_cast<int64_t>(body.size() / 4) + 6, {}};
    return result;
  }
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler&) override {
    return generate(request);
  }

 private:
  ClientOptions options_ = [] {
    ClientOptions o;
    o.model = "gpt-4o-mini";
    return o;
  }();
};

void BM_LoopIteration(benchmark::State& state) {
  ConversationOptions options;
  options.llm = std::make_shared<InstantClient>();
  ConversationManager base(options);
  base.addMessages(historyOf(state.range(0)));
  base.executeLlmCall();  // the history's messages are encoded once, here
  for (auto _ : state) {
    state.PauseTiming();
    ConversationManager conversation = base.clone();  // the same length every iteration
    conversation.addMessage(Message::user("And the next one?"));
    state.ResumeTiming();
    benchmark::DoNotOptimize(conversation.executeLlmCall());
  }
}
BENCHMARK(BM_LoopIteration)->Arg(10)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

// The prompt-cache diagnostic of the same call (diagnoseCache), which run() takes before its
// first call: its cost against BM_LoopIteration's, at the same history lengths (goal: < 5 %).
void BM_CacheDiagnostic(benchmark::State& state) {
  ConversationOptions options;
  options.llm = std::make_shared<InstantClient>();
  ConversationManager conversation(options);
  conversation.addMessages(historyOf(state.range(0)));
  conversation.executeLlmCall();  // the previous request; encodes and counts every message
  const std::vector<Message> pending = {Message::user("And the next one?")};
  for (auto _ : state)
    benchmark::DoNotOptimize(conversation.diagnoseCache(pending));
}
BENCHMARK(BM_CacheDiagnostic)->Arg(10)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

// The first diagnostic of a conversation (just loaded, cloned or edited): it sums the whole
// previous request once; the following ones extend that by the messages added since.
void BM_CacheDiagnosticCold(benchmark::State& state) {
  ConversationOptions options;
  options.llm = std::make_shared<InstantClient>();
  ConversationManager base(options);
  base.addMessages(historyOf(state.range(0)));
  base.executeLlmCall();
  const std::vector<Message> pending = {Message::user("And the next one?")};
  for (auto _ : state) {
    state.PauseTiming();
    ConversationManager conversation = base.clone();
    state.ResumeTiming();
    benchmark::DoNotOptimize(conversation.diagnoseCache(pending));
  }
}
BENCHMARK(BM_CacheDiagnosticCold)->Arg(10)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

// Answers the call that carries the prompt with one tool call, and the next with text, so a
// run() is one whole tool turn: two model calls, one tool call, four messages.
class ToolTurnClient : public InstantClient {
 public:
  ChatResult generate(const ChatRequest& request) override {
    ChatResult result = InstantClient::generate(request);
    if (!request.messages.empty()) {
      result.message = Message::assistant("", {ToolCall{"call_1", "lookup", R"({"q":"x"})"}});
      result.finishReason = "tool_calls";
    }
    return result;
  }
};

// One run() of a tool turn (model, tool, model) at a history of n messages: the whole loop
// (request bodies, the in-process tool call, the commits and the token accounting).
void BM_RunToolTurn(benchmark::State& state) {
  auto tools = std::make_shared<ToolRegistry>();
  tools->add("lookup", "looks up", nullptr,
             [](const nlohmann::json&, ToolContext&) -> nlohmann::json { return "found"; });
  ConversationOptions options;
  options.llm = std::make_shared<ToolTurnClient>();
  options.tools = tools;
  ConversationManager base(options);
  base.addMessages(historyOf(state.range(0)));
  base.run("warm up");  // the history's messages are encoded once, here
  for (auto _ : state) {
    state.PauseTiming();
    ConversationManager conversation = base.clone();
    state.ResumeTiming();
    benchmark::DoNotOptimize(conversation.run("And the next one?"));
  }
}
BENCHMARK(BM_RunToolTurn)->Arg(10)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

void BM_NaiveRequestBody(benchmark::State& state) {
  const std::vector<Message> history = historyOf(state.range(0));
  for (auto _ : state) {
    nlohmann::json body = {{"model", "gpt-4o-mini"}, {"messages", toJson(history)}};
    benchmark::DoNotOptimize(body.dump());
  }
}
BENCHMARK(BM_NaiveRequestBody)->Arg(10)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);

Conversation conversationOf(int64_t n) {
  AI ai("http://127.0.0.1:9/v1", "KEY", "model");
  Conversation convo = ai.createConversation();
  std::vector<std::string> list;
  for (int64_t i = 0; i < n; ++i)
    list.push_back("message " + std::to_string(i));
  convo.setConversationList(list);
  return convo;
}

void BM_Duplicate(benchmark::State& state) {
  Conversation convo = conversationOf(state.range(0));
  for (auto _ : state)
    benchmark::DoNotOptimize(convo.duplicate());
}
BENCHMARK(BM_Duplicate)->Arg(10)->Arg(10000)->Arg(100000);

void BM_DeepCopy(benchmark::State& state) {
  const std::vector<Message> history = historyOf(state.range(0));
  for (auto _ : state) {
    std::vector<Message> copy = history;
    benchmark::DoNotOptimize(copy.data());
  }
}
BENCHMARK(BM_DeepCopy)->Arg(10)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

size_t heapInUse() {
  return mallinfo2().uordblks;
}

// Bytes per fork of a 10 000-message conversation, each fork given one message of its own.
void BM_ForkMemory(benchmark::State& state) {
  Conversation convo = conversationOf(10000);
  for (auto _ : state) {
    const size_t before = heapInUse();
    std::vector<ConversationManager> forks;
    forks.reserve(1000);
    ConversationManager base;
    base.addMessages(historyOf(10000));
    const size_t afterBase = heapInUse();
    for (int i = 0; i < 1000; ++i) {
      forks.push_back(base.clone());
      forks.back().addMessage(Message::user("fork " + std::to_string(i)));
    }
    state.counters["bytes_per_fork"] = static_cast<double>(heapInUse() - afterBase) / 1000;
    state.counters["history_bytes"] = static_cast<double>(afterBase - before);
  }
}
BENCHMARK(BM_ForkMemory)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_DeepCopyMemory(benchmark::State& state) {
  for (auto _ : state) {
    const std::vector<Message> history = historyOf(10000);
    const size_t before = heapInUse();
    std::vector<std::vector<Message>> copies;
    copies.reserve(1000);
    for (int i = 0; i < 1000; ++i) {
      copies.push_back(history);
      copies.back().push_back(Message::user("fork " + std::to_string(i)));
    }
    state.counters["bytes_per_fork"] = static_cast<double>(heapInUse() - before) / 1000;
  }
}
BENCHMARK(BM_DeepCopyMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
