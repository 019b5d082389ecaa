// Gemini's explicit context caches, end to end against the mock, which
// enforces what Google does: a cache has a minimum size and a TTL (on the mock's clock, moved by
// the test), is used with its own model only, and a request using one may not repeat its system
// instruction or tools. The client makes a cache at the stable prefix (what the previous request
// shared), reuses it while valid, replaces it when it expires or the thread is edited.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "client/gemini_cache.hpp"
#include "mock/gemini_caches.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/gemini_client.hpp"
#include "parley/iso_time.hpp"
#include "parley/protocol.hpp"

namespace parley {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;

// A clock both sides read; the test moves it.
struct TestClock {
  std::atomic<int64_t> seconds{1'800'000'000};
  Clock::time_point now() const { return Clock::time_point(std::chrono::seconds(seconds.load())); }
};

class GeminiMock : public ::testing::Test {
 protected:
  void serve(const std::string& script) {
    mock::MockOptions options;
    options.script = mock::readScript(script);
    options.now = [this] { return clock_.now(); };
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  ClientOptions endpoint() {
    ClientOptions o;
    o.protocol = Protocol::Gemini;
    o.baseUrl = "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1beta";
    o.apiKey = "AIzaSy-test-key-0123456789";
    o.model = "gemini-3-flash";
    o.maxRetries = 0;
    return o;
  }

  // What a profile with prompt_cache = "explicit" and prompt_cache_ttl = ttl gives.
  ClientOptions caching(const std::string& ttl = "10m") {
    ClientOptions o = endpoint();
    o.promptCache.mode = PromptCachePolicy::Mode::Explicit;
    o.promptCache.ttl = ttl;
    o.now = [this] { return clock_.now(); };
    return o;
  }

  std::vector<json> requestsTo(const std::string& fragment) const {
    std::vector<json> out;
    for (const json& r : server_->requests()) {
      if (r["path"].get<std::string>().find(fragment) != std::string::npos) out.push_back(r);
    }
    return out;
  }

  TestClock clock_;
  std::unique_ptr<mock::MockServer> server_;
};

const std::string kLong(6000, 'x');  // about 1 500 tokens in the mock's estimate

TEST_F(GeminiMock, ACacheIsMadeAtTheStablePrefixAndReusedWhileValid) {
  serve(R"({"reply": {"content": "noted {{request_number}}", "usage": {"completion_tokens": 3}}})");
  ConversationOptions options;
  options.llm = makeClient(caching("10m"));
  options.systemPrompt = "Be terse.";
  ConversationManager c(options);
  c.run("Read this: " + kLong);
  EXPECT_TRUE(requestsTo("cachedContents").empty());  // nothing shared with a previous request

  // The second request shares the first one's contents: a cache of them, named by the request.
  c.run("Summarise it.");
  auto made = requestsTo("cachedContents");
  ASSERT_EQ(made.size(), 1u);
  const json cache = made[0]["body"];
  EXPECT_EQ(cache["model"], "models/gemini-3-flash");
  EXPECT_EQ(cache["ttl"], "600s");
  EXPECT_EQ(cache["systemInstruction"]["parts"][0]["text"], "Be terse.");
  ASSERT_EQ(cache["contents"].size(), 1u);
  EXPECT_EQ(cache["contents"][0]["parts"][0]["text"], "Read this: " + kLong);
  auto calls = requestsTo(":generateContent");
  ASSERT_EQ(calls.size(), 2u);
  json sent = calls[1]["body"];
  EXPECT_EQ(sent["cachedContent"], "cachedContents/mockcache1");
  EXPECT_FALSE(sent.contains("systemInstruction"));
  ASSERT_EQ(sent["contents"].size(), 2u);  // the model's reply and the new question
  EXPECT_EQ(sent["contents"][0]["role"], "model");

  // Reused while valid: no second cache.
  c.run("And again.");
  EXPECT_EQ(requestsTo("cachedContents").size(), 1u);
  EXPECT_EQ(requestsTo(":generateContent").back()["body"]["cachedContent"],
            "cachedContents/mockcache1");

  // Past its TTL (the mock forgets it; the client knows by the same clock): a new one.
  clock_.seconds += 601;
  c.run("Once more.");
  made = requestsTo("cachedContents");
  ASSERT_EQ(made.size(), 2u);
  EXPECT_EQ(made[1]["method"], "POST");
  EXPECT_EQ(requestsTo(":generateContent").back()["body"]["cachedContent"],
            "cachedContents/mockcache2");
}

TEST_F(GeminiMock, AnEditedThreadGetsANewCacheAndASmallPrefixMakesNone) {
  serve(R"({"reply": {"content": "ok"}})");
  auto client = makeClient(caching());
  ChatRequest request;
  request.messages = {Message::user("A: " + kLong), Message::assistant("ok"),
                      Message::user("B: " + kLong)};
  client->generate(request);
  request.messages.push_back(Message::assistant("ok"));
  request.messages.push_back(Message::user("C"));
  const ChatResult second = client->generate(request);
  ASSERT_EQ(requestsTo("cachedContents").size(), 1u);
  EXPECT_EQ(requestsTo("cachedContents")[0]["body"]["contents"].size(), 3u);
  // The cache's tokens come back as cached tokens (cachedContentTokenCount).
  ASSERT_TRUE(second.usage);
  EXPECT_GE(second.usage->raw["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 2048);
  // The second message edited: the cache is no longer a prefix; a new one is made of what this
  // request shares with the previous one (the first message alone).
  request.messages[1] = Message::assistant("edited");
  client->generate(request);
  auto routes = requestsTo("cachedContents");
  ASSERT_EQ(routes.size(), 2u);
  EXPECT_EQ(routes[1]["body"]["contents"].size(), 1u);
  EXPECT_EQ(requestsTo(":generateContent").back()["body"]["cachedContent"],
            "cachedContents/mockcache2");
  EXPECT_EQ(requestsTo(":generateContent").back()["body"]["contents"].size(), 4u);

  // Too small for a cache by the client's estimate: nothing is asked.
  server_->clearRequests();
  auto small = makeClient(caching());
  request.messages = {Message::user("short"), Message::assistant("ok"), Message::user("more")};
  small->generate(request);
  small->generate(request);
  EXPECT_TRUE(requestsTo("cachedContents").empty());
  EXPECT_FALSE(requestsTo(":generateContent").back()["body"].contains("cachedContent"));
}

TEST_F(GeminiMock, ACacheTheServerNoLongerHasIsDroppedAndTheRequestGoesWhole) {
  serve(R"({"reply": {"content": "ok"}})");
  // The client's clock runs behind the server's: it believes in a cache the server expired.
  TestClock behind;
  ClientOptions o = caching("10m");
  o.now = [&behind] { return behind.now(); };
  auto client = makeClient(o);
  ChatRequest request;
  request.messages = {Message::user("A: " + kLong), Message::assistant("ok"), Message::user("B")};
  client->generate(request);
  request.messages.push_back(Message::assistant("ok"));
  request.messages.push_back(Message::user("C"));
  client->generate(request);
  ASSERT_EQ(requestsTo("cachedContents").size(), 1u);
  clock_.seconds += 3600;
  request.messages.push_back(Message::assistant("ok"));
  request.messages.push_back(Message::user("D"));
  EXPECT_EQ(client->generate(request).message.content, "ok");
  auto calls = requestsTo(":generateContent");
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[2]["body"]["cachedContent"], "cachedContents/mockcache1");  // refused, 403
  EXPECT_FALSE(calls[3]["body"].contains("cachedContent"));                   // sent whole
}

TEST(GeminiCacheStore, EnforcesWhatGoogleEnforces) {
  mock::GeminiCacheStore store;
  const auto t0 = Clock::time_point(std::chrono::seconds(1'800'000'000));
  auto count = [](const json& content, const std::string&) {
    return static_cast<int64_t>(content["contents"].dump().size() / 4);
  };
  const json big = {{"role", "user"}, {"parts", {{{"text", kLong}}}}};
  auto status = [](const std::function<void()>& f) {
    try {
      f();
      return 200;
    } catch (const mock::GeminiCacheError& e) {
      return e.status;
    }
  };
  // Too small, no model, a bad TTL, both TTL and expireTime: refused.
  EXPECT_EQ(status([&] {
              store.create({{"model", "models/m"}, {"contents", {{{"role", "user"}}}}}, t0, count);
            }),
            400);
  EXPECT_EQ(status([&] { store.create({{"contents", {big}}}, t0, count); }), 400);
  EXPECT_EQ(
      status([&] {
        store.create({{"model", "models/m"}, {"contents", {big}}, {"ttl", "soon"}}, t0, count);
      }),
      400);
  EXPECT_EQ(status([&] {
              store.create({{"model", "models/m"},
                            {"contents", {big}},
                            {"ttl", "60s"},
                            {"expireTime", "2030-01-01T00:00:00Z"}},
                           t0, count);
            }),
            400);
  const json made =
      store.create({{"model", "models/m"}, {"contents", {big}}, {"ttl", "60s"}}, t0, count);
  const std::string name = made["name"];
  EXPECT_EQ(made["expireTime"], isoTime(t0 + std::chrono::seconds(60)));
  EXPECT_EQ(store.get(name, t0)["name"], name);
  // Used with another model, or with a system instruction of the request's own: refused.
  int64_t tokens = 0;
  const json request = {{"cachedContent", name}, {"contents", {big}}};
  EXPECT_EQ(status([&] { store.expand(request, "other", t0, tokens); }), 400);
  json withSystem = request;
  withSystem["systemInstruction"] = {{"parts", {{{"text", "x"}}}}};
  EXPECT_EQ(status([&] { store.expand(withSystem, "m", t0, tokens); }), 400);
  const json expanded = store.expand(request, "m", t0, tokens);
  EXPECT_EQ(expanded["contents"].size(), 2u);
  EXPECT_GT(tokens, 1024);
  // Expired at its TTL: gone, as a deleted one is.
  EXPECT_EQ(status([&] { store.expand(request, "m", t0 + std::chrono::seconds(60), tokens); }),
            403);
  EXPECT_EQ(status([&] { store.get(name, t0); }), 403);
  const json again = store.create({{"model", "models/m"}, {"contents", {big}}}, t0, count);
  EXPECT_EQ(again["expireTime"], isoTime(t0 + std::chrono::hours(1)));  // the default TTL
  store.remove(again["name"], t0);
  EXPECT_EQ(status([&] { store.remove(again["name"], t0); }), 403);
  // A cap on live caches.
  mock::GeminiCacheStore capped(mock::GeminiCacheOptions{1024, 1});
  capped.create({{"model", "models/m"}, {"contents", {big}}}, t0, count);
  EXPECT_EQ(status([&] {
              capped.create({{"model", "models/m"}, {"contents", {big}}}, t0, count);
            }),
            429);
}

TEST(GeminiCacheTtl, ReadsDurations) {
  EXPECT_EQ(detail::geminiCacheTtl("", "f"), "");
  EXPECT_EQ(detail::geminiCacheTtl("1h", "f"), "3600s");
  EXPECT_EQ(detail::geminiCacheTtl("5m", "f"), "300s");
  EXPECT_EQ(detail::geminiCacheTtl("90s", "f"), "90s");
  EXPECT_EQ(detail::geminiCacheTtl("120", "f"), "120s");
  for (const char* bad : {"0s", "h", "1d", "-5m", "1.5h", "9999999999s"})
    EXPECT_THROW(detail::geminiCacheTtl(bad, "f"), ValidationError) << bad;
}

}  // namespace
}  // namespace parley
