// `parley tokens`: counts, ids, chat requests, and the estimate fallback, run as a user would.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/tokens.hpp"

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status;
  std::string out;
};

// Runs the parley binary with `args` (a shell fragment); stdout is captured, stderr kept apart.
CliRun parley(const std::string& args, const std::string& env = "") {
  std::string cmd = env + "'" + PARLEY_CLI + "' " + args;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  CliRun r{-1, ""};
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0)
    r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class TokensCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("parley-tokens-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  fs::path dir_;
};

TEST_F(TokensCli, CountsFilesAndStdin) {
  const std::string text = "Hello, world! Counting tokens from the command line.\n";
  fs::path a = write("a.txt", text);
  fs::path b = write("b.txt", text + text);
  auto enc = parley::loadEncoding("cl100k_base");
  const size_t n = enc->count(text);

  CliRun one = parley("tokens --encoding cl100k_base '" + a.string() + "'");
  EXPECT_EQ(one.status, 0);
  EXPECT_EQ(one.out, std::to_string(n) + "\n");

  CliRun two = parley("tokens --encoding cl100k_base '" + a.string() + "' '" + b.string() + "'");
  EXPECT_EQ(two.status, 0);
  EXPECT_EQ(two.out, std::to_string(n) + "\t" + a.string() + "\n" +
                         std::to_string(enc->count(text + text)) + "\t" + b.string() + "\n");

  CliRun in = parley("tokens --encoding cl100k_base < '" + a.string() + "'");
  EXPECT_EQ(in.out, std::to_string(n) + "\n");
}

TEST_F(TokensCli, IdsAreOneJsonArrayPerFile) {
  fs::path a = write("a.txt", "first file");
  fs::path b = write("b.txt", "second <|endoftext|> file");
  CliRun r = parley("tokens --ids '" + a.string() + "' '" + b.string() + "'");
  ASSERT_EQ(r.status, 0);
  auto enc = parley::loadEncoding("o200k_base");  // the default encoding
  const size_t nl = r.out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, nl)), nlohmann::json(enc->encode("first file")));
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(nl + 1)),
            nlohmann::json(enc->encode("second <|endoftext|> file")));
  CliRun special = parley("tokens --ids --allow-special '" + b.string() + "'");
  parley::EncodeOptions all;
  all.allowAllSpecial = true;
  EXPECT_EQ(nlohmann::json::parse(special.out),
            nlohmann::json(enc->encode("second <|endoftext|> file", all)));
}

TEST_F(TokensCli, CountsChatRequest) {
  fs::path chat = write("chat.json", R"({
    "messages": [
      {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
      {"role": "user", "content": "What's the weather like in San Francisco?"}],
    "tools": [{"type": "function", "function": {"name": "get_current_weather",
      "description": "Get the current weather in a given location",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}]})");
  CliRun r = parley("tokens --chat '" + chat.string() + "'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "101\n");  // the cookbook's prompt_tokens for gpt-4o
  CliRun bad =
      parley("tokens --chat '" + write("bad.json", "{\"nope\": 1}").string() + "' 2>/dev/null");
  EXPECT_EQ(bad.status, 2);
}

TEST_F(TokensCli, EstimatesWithoutVocabulary) {
  fs::path a = write("a.txt", "abcdefghij");  // 10 code points -> ceil(10 / 2.5) = 4
  fs::create_directories(dir_ / "empty");
  fs::path err = dir_ / "err";
  CliRun r = parley("tokens '" + a.string() + "' 2>'" + err.string() + "'",
                    "PARLEY_DATA_DIR='" + (dir_ / "empty").string() + "' ");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "4\n");
  std::ifstream in(err);
  std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("estimates"), std::string::npos) << message;
  CliRun ids = parley("tokens --ids '" + a.string() + "' 2>/dev/null",
                      "PARLEY_DATA_DIR='" + (dir_ / "empty").string() + "' ");
  EXPECT_EQ(ids.status, 1);
}

// The rank table: written at the first load into PARLEY_CACHE_DIR, mapped by the next process
// with the same counts, and written again when it is damaged (a damaged table is not used).
TEST_F(TokensCli, TheFirstLoadWritesARankTableTheNextOnesMapIt) {
  const std::string text = "Rank tables are mapped, not parsed: les données, 数据, 1234567.\n";
  fs::path a = write("a.txt", text);
  const fs::path cache = dir_ / "cache";
  const std::string env = "PARLEY_CACHE_DIR='" + cache.string() + "' ";
  const std::string expected =
      std::to_string(parley::loadEncoding("o200k_base")->count(text)) + "\n";
  auto tables = [&] {
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(cache, ec))
      found.push_back(entry.path());
    return found;
  };
  CliRun first = parley("tokens '" + a.string() + "'", env);
  EXPECT_EQ(first.status, 0);
  EXPECT_EQ(first.out, expected);
  ASSERT_EQ(tables().size(), 1u);
  const fs::path table = tables().front();
  EXPECT_EQ(table.filename().string().rfind("o200k_base-446a9538cb6c348e.v", 0), 0u) << table;
  const auto written = fs::last_write_time(table);

  CliRun second = parley("tokens '" + a.string() + "'", env);
  EXPECT_EQ(second.out, expected);
  EXPECT_EQ(fs::last_write_time(table), written);  // mapped, not written again

  // A damaged header: not used, and replaced.
  {
    std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  CliRun damaged = parley("tokens '" + a.string() + "'", env);
  EXPECT_EQ(damaged.out, expected);
  CliRun again = parley("tokens '" + a.string() + "'", env);
  EXPECT_EQ(again.out, expected);
  std::ifstream in(table, std::ios::binary);
  in.seekg(100);
  EXPECT_NE(in.get(), 0x7f);
}

// One turn without a token limit counts nothing, so it loads (and writes) no vocabulary.
TEST_F(TokensCli, AnAskWithoutATokenLimitLoadsNoVocabulary) {
  const fs::path cache = dir_ / "cache";
  // No endpoint: the built-in mock's demo agent answers, offline.
  const std::string env =
      "env -u OPENAI_BASE_URL -u OPENAI_API_KEY -u PARLEY_CONFIG "
      "PARLEY_CACHE_DIR='" +
      cache.string() + "' ";
  CliRun r = parley("ask --no-save --no-stream hello 2>/dev/null </dev/null", env);
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.out.empty());
  EXPECT_FALSE(fs::exists(cache));
  CliRun count = parley("tokens '" + write("a.txt", "hello").string() + "'", env);
  EXPECT_EQ(count.out, "1\n");
  EXPECT_TRUE(fs::exists(cache));  // the same cache, written by a count
}

TEST_F(TokensCli, UnknownEncodingIsUsageError) {
  CliRun r = parley("tokens --encoding p50k_base 2>/dev/null </dev/null");
  EXPECT_EQ(r.status, 2);
}

TEST_F(TokensCli, AReaderThatWentAwayEndsItQuietlyNotBySignal) {
  // stdout is a pipe whose reader is gone: writing fails with EPIPE. SIGPIPE used to end the
  // process (status 141 in a shell) wherever it was; a reader that stopped reading
  // (`parley history list | head`) wanted no more, so it is not an error either.
  fs::path file = write("many.txt", std::string(200'000, 'a') + "\n");
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::execl(PARLEY_CLI, PARLEY_CLI, "tokens", "--ids", file.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
