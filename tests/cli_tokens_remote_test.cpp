// `parley tokens --chat FILE --remote`: the endpoint's count beside the local one, against the
// mock (whose count is the prompt_tokens it would report), for both counting APIs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"

namespace parley {
namespace {

class CliTokensRemote : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    mock::MockOptions options;
    options.script = mock::readScript(R"({"reply": {"content": "ok"}})");
    options.promptTokensScale = 1.3;
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
    std::ofstream(chat_) << R"({"messages": [
      {"role": "system", "content": "You report the weather."},
      {"role": "user", "content": "What is the weather in Oslo? I am planning a long walk."}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
  }
  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  testing::CliRun tokens(std::vector<std::string> args) {
    args.insert(args.begin(), {"tokens", "--chat", chat_.string()});
    return testing::runCli(args, dir_ / "scratch");
  }
  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-tokens-remote-" + std::to_string(::getpid()));
  std::filesystem::path chat_ = dir_ / "chat.json";
};

// "local<TAB>N" and "remote<TAB>M"; M is the mock's figure (ceil(text bytes / 4) x 1.3, the
// tool definitions not counted): 80 bytes of text -> 20 -> 26.
TEST_F(CliTokensRemote, PrintsTheServersCountBesideTheLocalOne) {
  const std::string textBytes = std::string("You report the weather.") +
                                "What is the weather in Oslo? I am planning a long walk.";
  const int64_t expected = std::llround(static_cast<double>((textBytes.size() + 3) / 4) * 1.3);

  for (const std::string protocol : {"anthropic", "openai-chat"}) {
    server_->clearRequests();
    testing::CliRun run = tokens(
        {"--remote", "--base-url", server_->baseUrl(), "--protocol", protocol, "--model", "m"});
    ASSERT_EQ(run.exitCode, 0) << protocol << ": " << run.err;
    testing::CliRun local = tokens({});
    ASSERT_EQ(local.exitCode, 0) << local.err;
    EXPECT_EQ(run.out, "local\t" + local.out + "remote\t" + std::to_string(expected) + "\n")
        << protocol;
    const auto requests = server_->requests();
    ASSERT_FALSE(requests.empty());
    EXPECT_EQ(requests[0]["path"],
              protocol == "anthropic" ? "/v1/messages/count_tokens" : "/apply-template");
  }
}

TEST_F(CliTokensRemote, ErrorsAreClear) {
  testing::CliRun noChat =
      testing::runCli({"tokens", "--remote", "--base-url", server_->baseUrl()}, dir_ / "scratch");
  EXPECT_NE(noChat.exitCode, 0);
  EXPECT_NE(noChat.err.find("--chat"), std::string::npos) << noChat.err;

  testing::CliRun responses = tokens({"--remote", "--base-url", server_->baseUrl(), "--protocol",
                                      "openai-responses", "--model", "m"});
  EXPECT_NE(responses.exitCode, 0);
  EXPECT_NE(responses.err.find("openai-responses"), std::string::npos) << responses.err;

  // The root has no llama.cpp routes: the 404 is reported, nothing printed.
  testing::CliRun missing =
      tokens({"--remote", "--base-url", server_->baseUrl() + "/nowhere", "--model", "m"});
  EXPECT_NE(missing.exitCode, 0);
  EXPECT_TRUE(missing.out.empty()) << missing.out;
  EXPECT_NE(missing.err.find("404"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace parley
