// Listing an endpoint's models: LlmClient::listModels over the three protocols against the mock,
// the caps on what a server may send (models, pages), and `parley models` with the config file's
// [aliases] (which --model takes too).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "parley/errors.hpp"
#include "parley/protocol.hpp"
#include "parley/transport.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class ModelListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.models = {"alpha", "beta"};
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  ClientOptions endpoint(Protocol protocol) {
    ClientOptions o;
    o.baseUrl = server_->baseUrl();
    o.apiKey = "k";
    o.protocol = protocol;
    return o;
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley_models_" + std::to_string(::getpid()));
};

TEST_F(ModelListTest, EveryProtocolListsTheEndpointsModelsWithAGet) {
  for (Protocol protocol : {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic}) {
    SCOPED_TRACE(static_cast<int>(protocol));
    const std::vector<ModelInfo> models = makeClient(endpoint(protocol))->listModels();
    ASSERT_EQ(models.size(), 2u);
    EXPECT_EQ(models[0].id, "alpha");
    EXPECT_EQ(models[1].id, "beta");
    const json seen = server_->requests().back();
    EXPECT_EQ(seen["method"], "GET");
    EXPECT_EQ(seen["path"], "/v1/models");
    if (protocol == Protocol::Anthropic) {
      EXPECT_EQ(models[0].displayName, "Parley alpha");
      EXPECT_EQ(seen["headers"]["x-api-key"], "k");
      EXPECT_TRUE(seen["headers"].contains("anthropic-version"));
    } else {
      EXPECT_EQ(models[0].ownedBy, "parley");
      EXPECT_TRUE(models[0].created.has_value());
      EXPECT_EQ(seen["headers"]["authorization"], "Bearer k");
    }
  }
}

// Answers every GET with the same JSON body, counting the calls.
class CannedTransport : public HttpTransport {
 public:
  explicit CannedTransport(std::string body) : body_(std::move(body)) {}
  void send(const HttpRequest& request, HttpReplySink& sink) override {
    EXPECT_EQ(request.method, HttpMethod::Get);
    ++calls;
    sink.reset();
    sink.onBody(body_, HttpReplyInfo{200, ""});
  }
  int calls = 0;

 private:
  std::string body_;
};

TEST_F(ModelListTest, AServerCannotListWithoutEndOrBeyondTheCap) {
  // has_more forever, with a new cursor each time: stopped after 100 pages.
  auto endless = std::make_shared<CannedTransport>(
      R"({"data": [{"id": "m"}], "has_more": true, "last_id": "m"})");
  ClientOptions anthropic = endpoint(Protocol::Anthropic);
  anthropic.transport = endless;
  // The same cursor twice ends the listing: a server that repeats itself is not followed.
  EXPECT_EQ(makeClient(anthropic)->listModels().size(), 2u);
  EXPECT_EQ(endless->calls, 2);

  json many = {{"data", json::array()}};
  for (int i = 0; i <= 10'000; ++i)
    many["data"].push_back({{"id", "m" + std::to_string(i)}});
  auto huge = std::make_shared<CannedTransport>(many.dump());
  ClientOptions openai = endpoint(Protocol::OpenAiChat);
  openai.transport = huge;
  try {
    makeClient(openai)->listModels();
    FAIL() << "expected a ProtocolError";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("longer than 10000 models"), std::string::npos)
        << e.what();
  }

  auto bad = std::make_shared<CannedTransport>(R"({"object": "list"})");
  openai.transport = bad;
  EXPECT_THROW(makeClient(openai)->listModels(), ProtocolError);
}

TEST_F(ModelListTest, ACursorThatKeepsChangingStopsAtThePageCap) {
  // Each page names a new last_id: a transport that makes one up per call.
  class Paging : public HttpTransport {
   public:
    void send(const HttpRequest&, HttpReplySink& sink) override {
      ++calls;
      const std::string body = json{{"data", json::array({{{"id", "m" + std::to_string(calls)}}})},
                                    {"has_more", true},
                                    {"last_id", "m" + std::to_string(calls)}}
                                   .dump();
      sink.reset();
      sink.onBody(body, HttpReplyInfo{200, ""});
    }
    int calls = 0;
  };
  auto paging = std::make_shared<Paging>();
  ClientOptions anthropic = endpoint(Protocol::Anthropic);
  anthropic.transport = paging;
  EXPECT_THROW(makeClient(anthropic)->listModels(), ProtocolError);
  EXPECT_EQ(paging->calls, 100);
}

TEST_F(ModelListTest, ParleyModelsShowsAliasesAndModelTakesThem) {
  const auto config = dir_ / "config.toml";
  std::ofstream(config) << "[aliases]\nfast = \"beta\"\nquick = \"beta\"\n";
  CliRun run = testing::runCli(
      {"models", "--config", config.string(), "--base-url", server_->baseUrl()}, dir_ / "s");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(run.out, "alpha  parley\nbeta   parley, alias fast, alias quick\n");

  run = testing::runCli({"models", "--config", config.string(), "--base-url", server_->baseUrl(),
                         "--protocol", "anthropic", "--json"},
                        dir_ / "s");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json listed = json::parse(run.out);
  EXPECT_EQ(listed[1]["display_name"], "Parley beta");
  EXPECT_EQ(listed[1]["aliases"], json::array({"fast", "quick"}));

  run = testing::runCli({"ask", "--config", config.string(), "--base-url", server_->baseUrl(),
                         "--model", "fast", "--no-save", "hi"},
                        dir_ / "s");
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(server_->requests().back()["body"]["model"], "beta");

  std::ofstream(config) << "[aliases]\nfast = 3\n";
  run = testing::runCli({"ask", "--config", config.string(), "--base-url", server_->baseUrl(),
                         "--model", "fast", "--no-save", "hi"},
                        dir_ / "s");
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("aliases.fast: must be a model name"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace parley
