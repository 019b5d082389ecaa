// The price table (TOML entries, lookup by exact name and longest prefix, caps on the file) and
// the cost arithmetic of a reply's usage.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "parley/cost.hpp"
#include "parley/errors.hpp"
#include "parley/server_tools.hpp"
#include "parley/toml.hpp"

namespace {

using parley::ModelPrice;
using parley::PriceTable;
using parley::TokenUsage;

PriceTable tableOf(const std::string& toml) {
  return PriceTable::fromDocument(parley::parseToml(toml, "prices.toml"), "prices.toml");
}

std::string errorOf(const std::string& toml) {
  try {
    tableOf(toml);
  } catch (const parley::ValidationError& e) {
    return e.what();
  }
  return "(no error)";
}

TokenUsage usageOf(const std::string& json) {
  return *parley::usageFromJson(nlohmann::json::parse(json));
}

// A server's counts past int64_t, negative or as huge doubles, and sums of many calls: the
// totals saturate at 2^63-1 instead of wrapping negative.
TEST(Usage, CountsAndSumsSaturate) {
  constexpr int64_t kMost = std::numeric_limits<int64_t>::max();
  const TokenUsage huge =
      usageOf(R"({"prompt_tokens": 18446744073709551615, "completion_tokens": 1e300})");
  EXPECT_EQ(huge.promptTokens, kMost);
  EXPECT_EQ(huge.completionTokens, kMost);
  EXPECT_EQ(huge.totalTokens, kMost);
  EXPECT_EQ(usageOf(R"({"prompt_tokens": -5, "completion_tokens": 2})").promptTokens, 0);
  TokenUsage sum;
  const TokenUsage big =
      usageOf(R"({"prompt_tokens": 9000000000000000000, "completion_tokens": 1})");
  parley::addUsage(sum, big);
  parley::addUsage(sum, big);
  EXPECT_EQ(sum.promptTokens, kMost);
  EXPECT_EQ(sum.completionTokens, 2);
  EXPECT_EQ(sum.totalTokens, kMost);
}

TEST(PriceTable, ReadsEntriesAndDefaults) {
  PriceTable table = tableOf(R"(
[prices]
as_of = 2025-08-15
[prices."gpt-4o-mini"]          # USD per million tokens
input = 0.15
cached_input = 0.075
output = 0.60
[prices."claude-sonnet-4"]
input = 3
cached_input = 0.3
cache_write = 3.75
output = 15
reasoning = 20
)");
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.asOf(), "2025-08-15");
  auto mini = table.find("gpt-4o-mini");
  ASSERT_TRUE(mini);
  EXPECT_DOUBLE_EQ(mini->input, 0.15);
  EXPECT_EQ(mini->cachedInput, 0.075);
  EXPECT_FALSE(mini->cacheWrite);
  EXPECT_FALSE(mini->reasoning);
  EXPECT_DOUBLE_EQ(mini->output, 0.60);
  auto sonnet = table.find("claude-sonnet-4");
  ASSERT_TRUE(sonnet);
  EXPECT_EQ(sonnet->cacheWrite, 3.75);
  EXPECT_EQ(sonnet->reasoning, 20.0);
}

TEST(PriceTable, DocumentWithoutPricesIsEmpty) {
  EXPECT_TRUE(tableOf("[profiles.x]\nbase_url = \"http://h\"\n").empty());
}

TEST(PriceTable, ExactNameThenLongestPrefixAtASeparator) {
  PriceTable table;
  table.set("gpt-4", {30, {}, {}, 60, {}, {}});
  table.set("gpt-4o", {2.5, {}, {}, 10, {}, {}});
  table.set("gpt-4o-mini", {0.15, {}, {}, 0.6, {}, {}});
  EXPECT_EQ(table.find("gpt-4o")->input, 2.5);
  EXPECT_EQ(table.find("gpt-4o-mini-2024-07-18")->input, 0.15);  // longest, not "gpt-4o"
  EXPECT_EQ(table.find("gpt-4o-2024-08-06")->input, 2.5);
  EXPECT_EQ(table.find("gpt-4-turbo")->input, 30);
  EXPECT_EQ(table.find("gpt-4:latest")->input, 30);
  // A prefix that does not end at a separator is another model, not a version of it.
  EXPECT_FALSE(table.find("gpt-4omni"));
  EXPECT_FALSE(table.find("gpt-"));
  EXPECT_FALSE(table.find("gpt"));
  EXPECT_FALSE(table.find("llama3"));
  EXPECT_FALSE(table.find(""));
}

TEST(PriceTable, UnpricedIsNotFree) {
  PriceTable table;
  table.set("free-model", {0, {}, {}, 0, {}, {}});
  const TokenUsage usage = usageOf(R"({"prompt_tokens": 10, "completion_tokens": 5})");
  EXPECT_EQ(table.cost("free-model", usage), 0.0);
  EXPECT_FALSE(table.cost("other-model", usage).has_value());
}

TEST(PriceTable, RejectsBadEntries) {
  EXPECT_NE(errorOf("[prices.m]\ninput = 1\n").find("prices.m.output: is required"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices.m]\noutput = 1\n").find("prices.m.input: is required"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices.m]\ninput = -1\noutput = 1\n").find("prices.m.input: must be a non-"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices.m]\ninput = \"1\"\noutput = 1\n").find("must be a number"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices.m]\ninput = nan\noutput = 1\n").find("prices.m.input"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices.m]\ninput = 1\noutput = 1\ncached = 1\n")
                .find("prices.m.cached: unknown price"),
            std::string::npos);
  EXPECT_NE(errorOf("[prices]\nm = 3\n").find("prices.m: must be a table"), std::string::npos);
  EXPECT_NE(errorOf("prices = 3\n").find("prices: must be a table"), std::string::npos);
  EXPECT_NE(errorOf("[prices]\nas_of = 3\n").find("prices.as_of: must be a date"),
            std::string::npos);
}

TEST(PriceTable, CapsEntriesAndNameLength) {
  std::string many = "[prices]\n";
  for (std::size_t i = 0; i <= parley::kMaxPriceEntries; ++i)
    many += "m" + std::to_string(i) + " = {input = 1, output = 2}\n";
  EXPECT_NE(errorOf(many).find("more than " + std::to_string(parley::kMaxPriceEntries) + " models"),
            std::string::npos);
  std::string atCap = "[prices]\n";
  for (std::size_t i = 0; i < parley::kMaxPriceEntries; ++i)
    atCap += "m" + std::to_string(i) + " = {input = 1, output = 2}\n";
  EXPECT_EQ(tableOf(atCap).size(), parley::kMaxPriceEntries);

  const std::string longName(parley::kMaxPricedModelNameBytes + 1, 'x');
  EXPECT_NE(errorOf("[prices.\"" + longName + "\"]\ninput = 1\noutput = 1\n").find("longer than"),
            std::string::npos);
}

class PriceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("parley_cost_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

TEST_F(PriceFileTest, ReadsAFileAndNamesItInErrors) {
  const std::string good = write("good.toml", "[prices.m]\ninput = 1\noutput = 2\n");
  EXPECT_EQ(PriceTable::fromFile(good).find("m")->output, 2);
  const std::string bad = write("bad.toml", "[prices.m]\ninput = 1\n");
  try {
    PriceTable::fromFile(bad);
    FAIL() << "a missing output was accepted";
  } catch (const parley::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_THROW(PriceTable::fromFile((dir_ / "missing.toml").string()), parley::ValidationError);
}

TEST_F(PriceFileTest, RefusesAFileOverTheSizeCap) {
  std::string text = "[prices.m]\ninput = 1\noutput = 2\n";
  text += "#" + std::string(parley::kMaxPriceFileBytes, 'x') + "\n";
  const std::string path = write("big.toml", text);
  try {
    PriceTable::fromFile(path);
    FAIL() << "a file over the cap was read";
  } catch (const parley::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than"), std::string::npos) << e.what();
  }
}

TEST(PriceTable, ShippedFileIsFoundAndValid) {
  auto path = PriceTable::shippedFile();
  ASSERT_TRUE(path) << "data/prices.toml is not in the build tree's data directory";
  PriceTable shipped = PriceTable::fromFile(path->string());
  EXPECT_FALSE(shipped.asOf().empty());
  EXPECT_GE(shipped.size(), 10u);
  auto mini = shipped.find("gpt-4o-mini-2024-07-18");
  ASSERT_TRUE(mini);
  EXPECT_DOUBLE_EQ(mini->input, 0.15);
  // Gemini, as Google's pricing page gives it (data/prices.toml says when it was read): cache
  // reads at a tenth of input, the Gemini 3 previews.
  auto flash = shipped.find("gemini-2.5-flash-preview-09-2025");
  ASSERT_TRUE(flash);
  EXPECT_DOUBLE_EQ(flash->input, 0.30);
  EXPECT_DOUBLE_EQ(flash->cachedInput.value_or(0), 0.03);
  auto pro3 = shipped.find("gemini-3-pro-preview");
  ASSERT_TRUE(pro3);
  EXPECT_DOUBLE_EQ(pro3->output, 12.00);
  EXPECT_DOUBLE_EQ(shipped.find("gemini-2.5-pro")->cachedInput.value_or(0), 0.125);
}

TEST(Cost, SplitsUsageByHowItIsBilled) {
  // Normalised usage: prompt counts cache reads and writes, completion counts reasoning.
  const TokenUsage usage = usageOf(R"({"prompt_tokens": 1000, "completion_tokens": 300,
      "prompt_tokens_details": {"cached_tokens": 600, "cache_creation_tokens": 100},
      "completion_tokens_details": {"reasoning_tokens": 200}})");
  const parley::BilledTokens billed = parley::billedTokens(usage);
  EXPECT_EQ(billed.input, 300);
  EXPECT_EQ(billed.cachedInput, 600);
  EXPECT_EQ(billed.cacheWrite, 100);
  EXPECT_EQ(billed.output, 100);
  EXPECT_EQ(billed.reasoning, 200);

  ModelPrice price{3, 0.3, 3.75, 15, {}, {}};
  // 300*3 + 600*0.3 + 100*3.75 + (100+200)*15, per million.
  EXPECT_NEAR(parley::costOf(usage, price), (900 + 180 + 375 + 4500) / 1e6, 1e-12);
  price.reasoning = 60;
  EXPECT_NEAR(parley::costOf(usage, price), (900 + 180 + 375 + 1500 + 12000) / 1e6, 1e-12);
  // Without cache prices, reads and writes are billed as input.
  const ModelPrice plain{3, {}, {}, 15, {}, {}};
  EXPECT_NEAR(parley::costOf(usage, plain), (1000 * 3 + 300 * 15) / 1e6, 1e-12);
}

TEST(Cost, PlainUsageAndInconsistentDetails) {
  const ModelPrice price{0.15, 0.075, {}, 0.60, {}, {}};
  EXPECT_NEAR(
      parley::costOf(usageOf(R"({"prompt_tokens": 2000, "completion_tokens": 500})"), price),
      (2000 * 0.15 + 500 * 0.60) / 1e6, 1e-12);
  // A server that reports more cached tokens than prompt tokens: no negative input.
  const auto odd = parley::billedTokens(usageOf(
      R"({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}})"));
  EXPECT_EQ(odd.input, 0);
  EXPECT_EQ(odd.cachedInput, 50);
}

TEST(Cost, ATurnSumsItsReplies) {
  PriceTable table;
  table.set("m", {1, {}, {}, 2, {}, {}});
  std::vector<parley::Message> turn = {parley::Message::user("q"),
                                       parley::Message::assistant("calling"),
                                       parley::Message::assistant("done")};
  turn[1].usage = usageOf(R"({"prompt_tokens": 100, "completion_tokens": 10})");
  turn[2].usage = usageOf(R"({"prompt_tokens": 200, "completion_tokens": 20})");
  EXPECT_NEAR(*table.cost("m", turn), (300 * 1 + 30 * 2) / 1e6, 1e-12);
  EXPECT_EQ(table.cost("m", std::span(turn).first(1)), 0.0);
  EXPECT_FALSE(table.cost("unknown", turn));
}

// Web searches are billed per call on top of the tokens, at the price per 1 000 searches;
// unpriced searches cost nothing, and a reply without usage still pays for its searches.
TEST(Cost, WebSearchesArePricedPerThousand) {
  const PriceTable read = PriceTable::fromDocument(
      parley::parseToml("[prices.g]\ninput = 1\noutput = 2\nweb_search = 14\n", "p.toml"),
      "p.toml");
  ASSERT_TRUE(read.find("g"));
  EXPECT_EQ(read.find("g")->webSearch, 14.0);
  parley::Message reply = parley::Message::assistant("Spain won.");
  reply.extra[std::string(parley::kGeminiMetadata)] = {
      {"groundingMetadata", {{"webSearchQueries", {"a", "b", "c"}}}}};
  EXPECT_NEAR(*read.cost("g", reply), 3 * 14 / 1000.0, 1e-12);
  reply.usage = usageOf(R"({"prompt_tokens": 100, "completion_tokens": 10})");
  EXPECT_NEAR(*read.cost("g", reply), (100 * 1 + 10 * 2) / 1e6 + 3 * 14 / 1000.0, 1e-12);
  EXPECT_NEAR(*read.cost("g", std::span(&reply, 1)), *read.cost("g", reply), 1e-15);
  PriceTable unpriced;
  unpriced.set("g", {1, {}, {}, 2, {}, {}});
  EXPECT_NEAR(*unpriced.cost("g", reply), (100 * 1 + 10 * 2) / 1e6, 1e-12);
  EXPECT_NE(errorOf("[prices.m]\ninput = 1\noutput = 1\nweb_search = -1\n")
                .find("prices.m.web_search: must be a non-negative number (USD per 1 000 web"),
            std::string::npos);
}

TEST(PriceTable, MergeReplacesAndAdds) {
  PriceTable base = tableOf(
      "[prices]\nas_of = 2025-01-01\n[prices.a]\ninput = 1\noutput = 1\n"
      "[prices.b]\ninput = 2\noutput = 2\n");
  base.merge(tableOf("[prices.b]\ninput = 5\noutput = 5\n[prices.c]\ninput = 3\noutput = 3\n"));
  EXPECT_EQ(base.size(), 3u);
  EXPECT_EQ(base.find("a")->input, 1);
  EXPECT_EQ(base.find("b")->input, 5);
  EXPECT_EQ(base.find("c")->input, 3);
  EXPECT_EQ(base.asOf(), "2025-01-01");
}

}  // namespace
