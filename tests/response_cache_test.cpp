// The executor's response cache: full-key matches, LRU order, capacity 1, recency on hits,
// concurrent use; and CachedLlmClient in front of a counting fake client.
#include "executor/response_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "parley/errors.hpp"

namespace parley::detail {
namespace {

ChatResult reply(const std::string& content) {
  ChatResult r;
  r.message = Message::assistant(content);
  r.finishReason = "stop";
  return r;
}

std::optional<std::string> contentOf(ResponseCache& cache, const std::string& key) {
  auto hit = cache.find(key);
  if (!hit) return std::nullopt;
  return hit->message.content;
}

TEST(ResponseCache, OnlyTheSameBytesHit) {
  ResponseCache cache(1000);
  // Keys that differ in one byte, in length only, or only past a long shared prefix.
  const std::string prefix(10'000, 'x');
  std::vector<std::string> keys = {"",     "a",          "b",         "ab", std::string("a\0", 2),
                                   prefix, prefix + "y", prefix + "z"};
  for (int i = 0; i < 200; ++i)
    keys.push_back(prefix + std::to_string(i));
  for (const std::string& key : keys)
    cache.insert(key, reply("value of " + key.substr(key.size() > 20 ? key.size() - 20 : 0)));
  for (const std::string& key : keys)
    EXPECT_EQ(contentOf(cache, key),
              "value of " + key.substr(key.size() > 20 ? key.size() - 20 : 0));
  EXPECT_EQ(contentOf(cache, prefix + "w"), std::nullopt);
  EXPECT_EQ(contentOf(cache, "c"), std::nullopt);
}

TEST(ResponseCache, EvictsTheLeastRecentlyUsed) {
  ResponseCache cache(3);
  cache.insert("a", reply("A"));
  cache.insert("b", reply("B"));
  cache.insert("c", reply("C"));
  cache.insert("d", reply("D"));  // evicts a, the oldest
  EXPECT_EQ(contentOf(cache, "a"), std::nullopt);
  EXPECT_EQ(contentOf(cache, "b"), "B");
  cache.insert("e", reply("E"));  // b was just used: c goes
  EXPECT_EQ(contentOf(cache, "c"), std::nullopt);
  EXPECT_EQ(contentOf(cache, "b"), "B");
  EXPECT_EQ(contentOf(cache, "d"), "D");
  EXPECT_EQ(contentOf(cache, "e"), "E");
  auto stats = cache.stats();
  EXPECT_EQ(stats.size, 3u);
  EXPECT_EQ(stats.evictions, 2u);
  EXPECT_EQ(stats.hits, 4u);
  EXPECT_EQ(stats.misses, 2u);
}

TEST(ResponseCache, AHitRefreshesRecency) {
  ResponseCache cache(2);
  cache.insert("old", reply("1"));
  cache.insert("new", reply("2"));
  ASSERT_TRUE(cache.find("old"));  // now the most recent
  cache.insert("third", reply("3"));
  EXPECT_EQ(contentOf(cache, "old"), "1");
  EXPECT_EQ(contentOf(cache, "new"), std::nullopt);
}

TEST(ResponseCache, ReinsertingAKeyReplacesItsReplyAndRefreshesIt) {
  ResponseCache cache(2);
  cache.insert("k", reply("first"));
  cache.insert("other", reply("o"));
  cache.insert("k", reply("second"));
  cache.insert("third", reply("3"));  // "other" is the oldest now
  EXPECT_EQ(contentOf(cache, "k"), "second");
  EXPECT_EQ(contentOf(cache, "other"), std::nullopt);
  EXPECT_EQ(cache.stats().size, 2u);
}

TEST(ResponseCache, CapacityOneKeepsTheLastOnly) {
  ResponseCache cache(1);
  cache.insert("x", reply("X"));
  EXPECT_EQ(contentOf(cache, "x"), "X");
  cache.insert("y", reply("Y"));
  EXPECT_EQ(contentOf(cache, "x"), std::nullopt);
  EXPECT_EQ(contentOf(cache, "y"), "Y");
  EXPECT_EQ(cache.stats().size, 1u);
  EXPECT_THROW(ResponseCache(0), ValidationError);
}

TEST(ResponseCache, KeysThatDifferAnywhereAreDifferent) {
  ResponseCache cache(4);
  const std::string key(10'000, 'k');
  cache.insert(key, reply("long"));
  std::string changed = key;
  changed[5'000] = 'K';
  EXPECT_EQ(contentOf(cache, changed), std::nullopt);
  EXPECT_EQ(contentOf(cache, key.substr(0, 9'999)), std::nullopt);
  EXPECT_EQ(contentOf(cache, key), "long");
}

TEST(ResponseCache, ManyThreadsAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 2'000;
  constexpr size_t kCapacity = 16;
  ResponseCache cache(kCapacity);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        // Overlapping key ranges: threads hit, replace and evict each other's entries. Each key
        // is asked for twice in a row, so hits do not depend on how the threads interleave.
        const std::string key = "key-" + std::to_string((t * 7 + i / 2) % 40);
        if (auto hit = cache.find(key)) {
          if (hit->message.content != "reply to " + key) ++wrong;
        } else {
          cache.insert(key, reply("reply to " + key));
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(wrong.load(), 0);
  auto stats = cache.stats();
  EXPECT_EQ(stats.size, kCapacity);
  EXPECT_EQ(stats.hits + stats.misses, static_cast<uint64_t>(kThreads) * kRounds);
  EXPECT_GT(stats.hits, 0u);
  EXPECT_GT(stats.evictions, 0u);
}

// Answers with a reply naming the call's number, with one tool call; counts the calls.
class CountingClient : public LlmClient {
 public:
  ChatResult generate(const ChatRequest&) override {
    ++calls;
    ChatResult r = reply("answer " + std::to_string(calls.load()));
    r.message.toolCalls = {{"call_original", "lookup", "{\"q\":1}"}};
    r.usage = TokenUsage{};
    r.usage->promptTokens = 7;
    r.usage->completionTokens = 3;
    r.usage->totalTokens = 10;
    r.reportedFinishReason = "tool_calls";
    r.raw = json::parse(R"({"choices": [{"message": {"tool_calls": [{"id": "call_original"}]}}]})");
    return r;
  }
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) override {
    ChatResult r = generate(request);
    StreamDelta d;
    d.content = r.message.content;
    onChunk(d);
    return r;
  }
  std::atomic<int> calls{0};
};

ChatRequest requestSaying(const std::string& text) {
  ChatRequest request;
  request.messages = {Message::user(text)};
  return request;
}

TEST(CachedLlmClient, ASecondIdenticalRequestIsAnsweredFromTheCache) {
  auto inner = std::make_shared<CountingClient>();
  auto cache = std::make_shared<ResponseCache>(8);
  ClientOptions profile;
  profile.model = "m";
  profile.apiKey = "sk-secret";
  CachedLlmClient client(inner, cache, "p", profile);

  ChatResult first = client.generate(requestSaying("hi"));
  ChatResult second = client.generate(requestSaying("hi"));
  EXPECT_EQ(inner->calls.load(), 1);
  EXPECT_EQ(second.message.content, first.message.content);
  EXPECT_EQ(second.finishReason, "stop");
  ASSERT_TRUE(second.usage);
  EXPECT_EQ(second.usage->totalTokens, 10);
  // The replayed tool call keeps its name and arguments under a fresh id.
  ASSERT_EQ(second.message.toolCalls.size(), 1u);
  EXPECT_EQ(second.message.toolCalls[0].name, "lookup");
  EXPECT_EQ(second.message.toolCalls[0].arguments, "{\"q\":1}");
  EXPECT_NE(second.message.toolCalls[0].id, "call_original");
  EXPECT_EQ(second.raw["choices"][0]["message"]["tool_calls"][0]["id"],
            second.message.toolCalls[0].id);

  auto other = requestSaying("hi");
  other.temperature = 0.5;  // a parameter is part of the request
  client.generate(other);
  EXPECT_EQ(inner->calls.load(), 2);
  other.model = "another";
  client.generate(other);
  EXPECT_EQ(inner->calls.load(), 3);

  // A streamed request of the same body hits, and sees the whole content as one delta.
  auto streamed = requestSaying("hi");
  streamed.stream = true;
  std::vector<std::string> deltas;
  ChatResult fromStream = client.generateStream(streamed, [&](const StreamDelta& d) {
    deltas.push_back(d.content);
    return true;
  });
  EXPECT_EQ(inner->calls.load(), 3);
  EXPECT_EQ(deltas, std::vector<std::string>{first.message.content});
  EXPECT_EQ(fromStream.message.content, first.message.content);

  // A chunk handler that says stop cancels a replay as it cancels a stream.
  EXPECT_THROW(client.generateStream(streamed, [](const StreamDelta&) { return false; }),
               CancelledError);
}

TEST(CachedLlmClient, ProfilesDoNotShareReplies) {
  auto inner = std::make_shared<CountingClient>();
  auto cache = std::make_shared<ResponseCache>(8);
  ClientOptions profile;
  profile.model = "m";
  CachedLlmClient a(inner, cache, "a", profile);
  CachedLlmClient b(inner, cache, "b", profile);
  a.generate(requestSaying("hi"));
  b.generate(requestSaying("hi"));
  EXPECT_EQ(inner->calls.load(), 2);
  a.generate(requestSaying("hi"));
  EXPECT_EQ(inner->calls.load(), 2);
}

// Fails, then answers with nothing, then answers.
class FlakyClient : public LlmClient {
 public:
  ChatResult generate(const ChatRequest&) override {
    const int n = ++calls;
    if (n == 1) throw ConnectionError("down");
    ChatResult r;
    r.message.role = Role::Assistant;
    if (n > 2) r.message.content = "finally";
    return r;
  }
  ChatResult generateStream(const ChatRequest& request, const ChunkHandler&) override {
    return generate(request);
  }
  std::atomic<int> calls{0};
};

TEST(CachedLlmClient, FailuresAndEmptyRepliesAreNotKept) {
  auto inner = std::make_shared<FlakyClient>();
  auto cache = std::make_shared<ResponseCache>(8);
  ClientOptions profile;
  profile.model = "m";
  CachedLlmClient client(inner, cache, "p", profile);
  EXPECT_THROW(client.generate(requestSaying("hi")), ConnectionError);
  EXPECT_EQ(client.generate(requestSaying("hi")).message.content, "");
  EXPECT_EQ(client.generate(requestSaying("hi")).message.content, "finally");
  EXPECT_EQ(client.generate(requestSaying("hi")).message.content, "finally");
  EXPECT_EQ(inner->calls.load(), 3);
  EXPECT_EQ(cache->stats().hits, 1u);
}

}  // namespace
}  // namespace parley::detail
