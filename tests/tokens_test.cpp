// The BPE encoder's contract, token counting with and without a vocabulary, chat-request
// counts against OpenAI's cookbook, and sharing one encoding between threads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "parley/bpe.hpp"
#include "parley/errors.hpp"
#include "parley/tokens.hpp"

namespace {

using parley::TokenId;

std::shared_ptr<const parley::Encoding> load(const std::string& name) {
  return parley::loadEncoding(name);
}

class EncodingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EncodingTest, DecodeRoundTripsValidUtf8) {
  auto enc = load(GetParam());
  std::string longWord;
  for (int i = 0; i < 5000; ++i)
    longWord += static_cast<char>('a' + (i * 7 + i / 13) % 26);
  for (const std::string& text :
       {std::string("Hello, world! It's 2024."), std::string("  leading and trailing  \n\n"),
        std::string("中文 日本語 한국어 👨‍👩‍👧‍👦 e\xcc\x81"),
        std::string(3000, ' ') + "x", std::string(1000, '9'), longWord}) {
    std::vector<TokenId> ids = enc->encode(text);
    EXPECT_EQ(enc->decode(ids), text);
    EXPECT_EQ(enc->count(text), ids.size());
  }
}

TEST_P(EncodingTest, EmptyTextHasNoTokens) {
  auto enc = load(GetParam());
  EXPECT_TRUE(enc->encode("").empty());
  EXPECT_EQ(enc->decode({}), "");
}

TEST_P(EncodingTest, SpecialTokensArePlainTextByDefault) {
  auto enc = load(GetParam());
  const TokenId eot = *enc->specialTokenId("<|endoftext|>");
  std::vector<TokenId> ids = enc->encode("a<|endoftext|>b");
  EXPECT_GT(ids.size(), 3u);
  for (TokenId id : ids)
    EXPECT_NE(id, eot);
  EXPECT_EQ(enc->decode(ids), "a<|endoftext|>b");
}

TEST_P(EncodingTest, AllowedSpecialTokenBecomesOneId) {
  auto enc = load(GetParam());
  const TokenId eot = *enc->specialTokenId("<|endoftext|>");
  parley::EncodeOptions options;
  options.allowedSpecial = {"<|endoftext|>"};
  std::vector<TokenId> ids = enc->encode("a<|endoftext|>b<|endofprompt|>", options);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *enc->specialTokenId("<|endofprompt|>")), 0);
  EXPECT_EQ(enc->decode(ids), "a<|endoftext|>b<|endofprompt|>");
  options.allowAllSpecial = true;
  EXPECT_EQ(enc->count("<|endoftext|><|endofprompt|>", options), 2u);
}

TEST_P(EncodingTest, UnknownAllowedSpecialIsValidationError) {
  auto enc = load(GetParam());
  parley::EncodeOptions options;
  options.allowedSpecial = {"<|nope|>"};
  EXPECT_THROW(enc->encode("x", options), parley::ValidationError);
}

TEST_P(EncodingTest, InvalidUtf8IsReadAsReplacementCharacters) {
  auto enc = load(GetParam());
  // Each maximal ill-formed subsequence is one U+FFFD (WHATWG): "\xe4\xb8" is one,
  // "\xc0\x80" is two, a lone continuation byte is one.
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(enc->encode("a\xe4\xb8z"), enc->encode("a" + fffd + "z"));
  EXPECT_EQ(enc->encode("a\xc0\x80z"), enc->encode("a" + fffd + fffd + "z"));
  EXPECT_EQ(enc->encode("\x80x\xff"), enc->encode(fffd + "x" + fffd));
  EXPECT_EQ(enc->encode("\xed\xa0\x80"), enc->encode(fffd + fffd + fffd));
  EXPECT_EQ(enc->decode(enc->encode("ok\xf0\x9f\x98")), "ok" + fffd);
}

TEST_P(EncodingTest, DecodeRejectsUnknownIds) {
  auto enc = load(GetParam());
  std::vector<TokenId> ids = {1, 4000000000u};
  EXPECT_THROW(enc->decode(ids), parley::ValidationError);
  EXPECT_FALSE(enc->tokenBytes(4000000000u).has_value());
}

TEST_P(EncodingTest, SharedByThreads) {
  const std::string text = "Concurrent use: one shared encoding, many threads. 中文 123456";
  const std::vector<TokenId> expected = load(GetParam())->encode(text);
  std::vector<std::thread> threads;
  std::vector<std::vector<TokenId>> results(8);
  std::vector<const parley::Encoding*> instances(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto enc = parley::loadEncoding(GetParam());
      instances[t] = enc.get();
      for (int i = 0; i < 200; ++i)
        results[t] = enc->encode(text + std::to_string(i % 3));
    });
  }
  for (auto& th : threads)
    th.join();
  auto enc = load(GetParam());
  const std::vector<TokenId> last = enc->encode(text + "1");
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(instances[t], enc.get());
    EXPECT_EQ(results[t], last);
  }
  EXPECT_NE(expected, last);
}

TEST_P(EncodingTest, SeveralThreadsGiveExactlyTheIdsOfOne) {
  // Every place a part may start (a line break, then a letter or digit) next to what could
  // join across it if the cut were wrong: punctuation and '/' after line breaks (o200k takes
  // them into the piece), whitespace runs, contractions, digits, CJK, invalid UTF-8.
  const std::string lines[] = {
      "int main() {\n",
      "  return 0;\n}\n",
      "see http://example.com/a/b.\n/usr/bin\n",
      "It's 2024; they'll see.\n",
      "\n\n\nAfter blank lines\r\n",
      "12345678 digits\n9 more\n",
      "中文字符，日本語のテキスト。\n",
      "\xff\xfe bad bytes \xe2\x82\n",
      "   indented\n\tTab\n",
      "x\n/y\n.\nz\n",
      "MixedCASE words'S\n",
  };
  std::string text;
  for (int i = 0; text.size() < (size_t{3} << 20); ++i)
    text += lines[static_cast<size_t>(i) % std::size(lines)] + std::to_string(i % 7);
  auto enc = load(GetParam());
  parley::EncodeOptions one;
  parley::EncodeOptions several;
  several.threads = 5;
  const std::vector<TokenId> expected = enc->encode(text, one);
  EXPECT_EQ(enc->encode(text, several), expected);
  EXPECT_EQ(enc->count(text, several), expected.size());
  several.threads = 0;  // one per core
  EXPECT_EQ(enc->count(text, several), expected.size());
  // A text with nowhere to cut is counted whole.
  const std::string noBreaks(size_t{1} << 20, 'a');
  EXPECT_EQ(enc->count(noBreaks, several), enc->count(noBreaks, one));
}

INSTANTIATE_TEST_SUITE_P(Encodings, EncodingTest, ::testing::Values("cl100k_base", "o200k_base"));

TEST(Encoding, UnknownNameIsValidationError) {
  EXPECT_THROW(parley::loadEncoding("p50k_base"), parley::ValidationError);
  EXPECT_THROW(parley::TokenCounter("nope"), parley::ValidationError);
}

TEST(Encoding, MalformedRankTextIsError) {
  const parley::EncodingSpec& spec = *parley::findEncodingSpec("cl100k_base");
  EXPECT_THROW(parley::Encoding::fromRankText(spec, "IQ== 0\nIg== 5\n"), parley::Error);
  EXPECT_THROW(parley::Encoding::fromRankText(spec, "I*== 0\n"), parley::Error);
  EXPECT_THROW(parley::Encoding::fromRankText(spec, "IQ== 0\n"), parley::Error);  // too short
}

// Points PARLEY_DATA_DIR at an empty directory for one test.
class WithoutVocabulary : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("parley-no-vocab-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ::setenv("PARLEY_DATA_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("PARLEY_DATA_DIR");
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(WithoutVocabulary, CountsAreFlaggedEstimates) {
  parley::TokenCounter counter("o200k_base");
  EXPECT_FALSE(counter.exact());
  EXPECT_EQ(counter.count("hello"), (parley::TokenCount{2, true}));        // ceil(5 / 2.5)
  EXPECT_EQ(counter.count("héllo wörld"), (parley::TokenCount{5, true}));  // 11 code points
  EXPECT_EQ(counter.count("中文字"), (parley::TokenCount{2, true}));       // ceil(3 / 2.5)
  EXPECT_EQ(counter.count(""), (parley::TokenCount{0, true}));
  EXPECT_EQ(parley::findEncoding("o200k_base"), nullptr);
  EXPECT_THROW(parley::loadEncoding("o200k_base"), parley::Error);
  parley::TokenCount chat =
      parley::countChatTokens({parley::Message::user("hello")}, nullptr, counter);
  EXPECT_TRUE(chat.estimate);
  // 3 per message + role "user" (2) + "hello" (2) + 3 priming.
  EXPECT_EQ(chat.tokens, 10);
}

TEST_F(WithoutVocabulary, DataDirOverrideFindsVocabulary) {
  ::unsetenv("PARLEY_DATA_DIR");
  auto real = parley::loadEncoding("cl100k_base");  // from the build tree
  std::filesystem::path found;
  for (const auto& d : parley::vocabularySearchPath()) {
    if (std::filesystem::exists(d / "cl100k_base.tiktoken")) {
      found = d / "cl100k_base.tiktoken";
      break;
    }
  }
  ASSERT_FALSE(found.empty());
  std::filesystem::copy_file(found, dir_ / "cl100k_base.tiktoken");
  ::setenv("PARLEY_DATA_DIR", dir_.c_str(), 1);
  ASSERT_EQ(parley::vocabularySearchPath().size(), 1u);
  auto viaOverride = parley::loadEncoding("cl100k_base");
  EXPECT_NE(viaOverride.get(), real.get());  // a different file, loaded once more
  EXPECT_EQ(viaOverride->encode("same ids"), real->encode("same ids"));
  EXPECT_EQ(parley::loadEncoding("cl100k_base").get(), viaOverride.get());
}

TEST(EstimateTokens, CeilOfCodePointsOverTwoAndAHalf) {
  EXPECT_EQ(parley::estimateTokens(""), 0);
  EXPECT_EQ(parley::estimateTokens("a"), 1);
  EXPECT_EQ(parley::estimateTokens("abcde"), 2);
  EXPECT_EQ(parley::estimateTokens("abcdef"), 3);
  EXPECT_EQ(parley::estimateTokens(std::string(1000, 'x')), 400);
  EXPECT_EQ(parley::estimateTokens("ééééé"), 2);  // code points, not bytes
}

// OpenAI cookbook "How to count tokens with tiktoken", section 6: prompt_tokens reported by the
// API were 129 for gpt-3.5-turbo / gpt-4 (cl100k_base) and 124 for gpt-4o (o200k_base).
std::vector<parley::Message> cookbookJargonMessages() {
  auto named = [](std::string name, std::string content) {
    parley::Message m = parley::Message::system(std::move(content));
    m.name = std::move(name);
    return m;
  };
  return {
      parley::Message::system("You are a helpful, pattern-following assistant that translates "
                              "corporate jargon into plain English."),
      named("example_user", "New synergies will help drive top-line growth."),
      named("example_assistant", "Things working well together will increase revenue."),
      named("example_user",
            "Let's circle back when we have more bandwidth to touch base on opportunities for "
            "increased leverage."),
      named("example_assistant", "Let's talk later when we're less busy about how to do better."),
      parley::Message::user("This late pivot means we don't have time to boil the ocean for the "
                            "client deliverable."),
  };
}

TEST(ChatTokens, MatchesCookbookPromptTokensForMessages) {
  EXPECT_EQ(parley::countChatTokens(cookbookJargonMessages(), nullptr,
                                    parley::TokenCounter(load("cl100k_base"))),
            (parley::TokenCount{129, false}));
  EXPECT_EQ(parley::countChatTokens(cookbookJargonMessages(), nullptr,
                                    parley::TokenCounter(load("o200k_base"))),
            (parley::TokenCount{124, false}));
  EXPECT_EQ(parley::countChatTokens(cookbookJargonMessages(), nullptr, "cl100k_base").tokens, 129);
}

// Section 7: with one tool definition, prompt_tokens were 105 (gpt-3.5-turbo, gpt-4) and 101
// (gpt-4o, gpt-4o-mini).
TEST(ChatTokens, MatchesCookbookPromptTokensWithTools) {
  const auto tools = nlohmann::json::parse(R"([{
    "type": "function",
    "function": {
      "name": "get_current_weather",
      "description": "Get the current weather in a given location",
      "parameters": {
        "type": "object",
        "properties": {
          "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
          "unit": {"type": "string", "description": "The unit of temperature to return",
                   "enum": ["celsius", "fahrenheit"]}
        },
        "required": ["location"]
      }
    }
  }])");
  const std::vector<parley::Message> messages = {
      parley::Message::system(
          "You are a helpful assistant that can answer to questions about the weather."),
      parley::Message::user("What's the weather like in San Francisco?"),
  };
  EXPECT_EQ(parley::countChatTokens(messages, tools, parley::TokenCounter(load("cl100k_base"))),
            (parley::TokenCount{105, false}));
  EXPECT_EQ(parley::countChatTokens(messages, tools, parley::TokenCounter(load("o200k_base"))),
            (parley::TokenCount{101, false}));
}

TEST(ChatTokens, MessageCountCoversNameAndToolCalls) {
  parley::TokenCounter counter(load("o200k_base"));
  parley::Message plain = parley::Message::assistant("Checking.");
  parley::Message withCall =
      parley::Message::assistant("Checking.", {{"call_1", "get_time", R"({"tz":"UTC"})"}});
  const auto base = parley::countMessageTokens(plain, counter).tokens;
  EXPECT_EQ(base, 3 + counter.count("assistant").tokens + counter.count("Checking.").tokens);
  EXPECT_EQ(parley::countMessageTokens(withCall, counter).tokens,
            base + parley::kToolCallOverheadTokens + counter.count("get_time").tokens +
                counter.count(R"({"tz":"UTC"})").tokens);
  parley::Message named = plain;
  named.name = "bot";
  EXPECT_EQ(parley::countMessageTokens(named, counter).tokens,
            base + 1 + counter.count("bot").tokens);
}

TEST(ChatTokens, BadToolsAreValidationErrors) {
  parley::TokenCounter counter(load("o200k_base"));
  EXPECT_THROW(parley::countToolTokens(nlohmann::json::object(), counter), parley::ValidationError);
  EXPECT_THROW(parley::countToolTokens(nlohmann::json::parse(R"([{"type":"function"}])"), counter),
               parley::ValidationError);
  EXPECT_EQ(parley::countToolTokens(nlohmann::json::array(), counter).tokens, 0);
  // A parameter outside the cookbook's model still costs something.
  auto simple = nlohmann::json::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
          "properties":{"xs":{"type":"array"}}}}}])");
  auto nested = simple;
  nested[0]["function"]["parameters"]["properties"]["xs"]["items"] = {{"type", "string"}};
  EXPECT_GT(parley::countToolTokens(nested, counter).tokens,
            parley::countToolTokens(simple, counter).tokens);
}

}  // namespace
