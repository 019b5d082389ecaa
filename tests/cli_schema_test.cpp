// `parley ask --schema`: the real binary against the mock server over loopback. The validated
// JSON alone on stdout, the schema forms (file, JSON text, concise), the exit codes, the
// profile's structured_output rung.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock_fixture.hpp"
#include "parley/structured_output.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class AskSchemaTest : public ::testing::Test {
 protected:
  void serve(const std::string& script) { server_ = testing::startMockServer(script); }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun ask(std::vector<std::string> args) {
    args.insert(args.begin(), {"ask", "--base-url", server_->baseUrl(), "--no-save"});
    return testing::runCli(args, dir_);
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-ask-schema-test-" + std::to_string(::getpid()));
};

constexpr const char* kPersonReply =
    R"({"match": {"response_format": "json_schema"}, "reply": {"content": "{\"name\": \"Ada\", \"age\": 36}"}})";

TEST_F(AskSchemaTest, TheConciseFormPrintsTheValidatedJsonAlone) {
  serve(kPersonReply);
  for (const char* mode : {"--stream", "--no-stream"}) {
    SCOPED_TRACE(mode);
    server_->clearRequests();
    CliRun run = ask({mode, "--schema", "name, age int: in years", "Who?"});
    ASSERT_EQ(run.exitCode, 0) << run.err;
    EXPECT_EQ(run.out, "{\"age\":36,\"name\":\"Ada\"}\n");
    const auto seen = server_->requests();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0]["body"]["response_format"]["json_schema"]["schema"],
              conciseSchema("name, age int: in years"));
  }
}

TEST_F(AskSchemaTest, AFileAndJsonTextAreSchemasToo) {
  serve(kPersonReply);
  const json schema = json::parse(R"({"type": "object", "properties": {"age": {"type": "integer"}},
                                      "required": ["age"]})");
  std::filesystem::create_directories(dir_);
  const auto file = dir_ / "person.schema.json";
  std::ofstream(file) << schema.dump(2);
  for (const std::string& given : {file.string(), schema.dump()}) {
    server_->clearRequests();
    CliRun run = ask({"--schema", given, "Who?"});
    ASSERT_EQ(run.exitCode, 0) << run.err;
    EXPECT_EQ(json::parse(run.out), json({{"name", "Ada"}, {"age", 36}}));
    EXPECT_EQ(server_->requests().at(0)["body"]["response_format"]["json_schema"]["schema"],
              schema);
  }
}

TEST_F(AskSchemaTest, NoValidAnswerIsExitCodeThreeNamingTheField) {
  serve(R"({"reply": {"content": "{\"name\": \"Ada\", \"age\": \"old\"}"}})");
  CliRun run = ask({"--schema", "name, age int", "Who?"});
  EXPECT_EQ(run.exitCode, 3) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("age: expected type integer, got string"), std::string::npos) << run.err;
  EXPECT_EQ(server_->requests().size(), 3u);  // the answer and two repairs
}

TEST_F(AskSchemaTest, BadSchemasAndCombinationsAreUsageErrorsBeforeAnythingIsSent) {
  serve(kPersonReply);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--schema", "name, age integer", "Who?"},
        std::vector<std::string>{"--schema", "{\"type\": ", "Who?"},
        std::vector<std::string>{"--schema", "{\"type\": \"array\"}", "Who?"},
        std::vector<std::string>{"--schema", "name", "--json", "Who?"},
        std::vector<std::string>{"--schema", "name", "--tools", "demo", "Who?"}}) {
    CliRun run = ask(args);
    EXPECT_EQ(run.exitCode, 2) << args[1] << ": " << run.err;
    EXPECT_NE(run.err.find("schema"), std::string::npos) << run.err;
  }
  std::filesystem::create_directories(dir_);
  const auto big = dir_ / "big.json";
  std::ofstream(big) << std::string(kMaxStructuredSchemaBytes + 1, ' ');
  CliRun run = ask({"--schema", big.string(), "Who?"});
  EXPECT_EQ(run.exitCode, 2) << run.err;
  EXPECT_NE(run.err.find("cap"), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(AskSchemaTest, TheProfileChoosesTheRung) {
  serve(
      R"({"match": {"tool_choice": "answer"}, "reply": {"tool_calls": [{"name": "answer", "arguments": {"name": "Ada", "age": 36}}]}})");
  std::filesystem::create_directories(dir_);
  const auto config = dir_ / "config.toml";
  std::ofstream(config) << "[profiles.mock]\nbase_url = \"" << server_->baseUrl()
                        << "\"\nmodel = \"m\"\nstructured_output = \"tool\"\n";
  CliRun run =
      ask({"--config", config.string(), "--profile", "mock", "--schema", "name, age int", "Who?"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(json::parse(run.out), json({{"name", "Ada"}, {"age", 36}}));
  std::ofstream(config) << "[profiles.mock]\nbase_url = \"" << server_->baseUrl()
                        << "\"\nstructured_output = \"strict\"\n";
  run = ask({"--config", config.string(), "--profile", "mock", "--schema", "name", "Who?"});
  EXPECT_EQ(run.exitCode, 2) << run.err;
  EXPECT_NE(run.err.find("structured_output"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace parley
