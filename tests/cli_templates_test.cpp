// Prompt templates ([templates.NAME] tables of the config file): `ask -t`, `chat -t` and
// `/template`, what the command line overrides, --save-template, `parley templates list|show`,
// and bad tables. The real binary against the mock.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

constexpr const char* kConfig = R"toml(
[profiles.local]
base_url = "http://127.0.0.1:1/v1"
model = "m"

[templates.review]
description = "Code review, terse"
system = "You review code."
model = "reviewer-model"
prompt = "Review this:\n\n$input (cost: $$5)"
[templates.review.parameters]
temperature = 0.2
reasoning_effort = "low"

[templates.translate]
system = "You translate into French."
prompt = "Translate:"
)toml";

class TemplatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    config_ = write("config.toml", kConfig);
    mock::MockOptions options;
    options.script = mock::readScript(R"({"reply": {"content": "ok"}})");
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun parley(std::vector<std::string> args, const std::string& input = "") {
    return testing::runCli(args, dir_ / "scratch", "", input);
  }

  CliRun ask(std::vector<std::string> args) {
    args.insert(args.begin(), {"ask", "--config", config_, "--base-url", server_->baseUrl(),
                               "--no-stream", "--no-save"});
    return parley(args);
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  json lastBody() { return server_->requests().back()["body"]; }

  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley_templates_test_" + std::to_string(::getpid()));
  std::string config_;
  std::unique_ptr<mock::MockServer> server_;
};

TEST_F(TemplatesTest, AskSendsTheTemplatesSystemPromptModelParametersAndPattern) {
  CliRun run = ask({"-t", "review", "x = 1"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json body = lastBody();
  EXPECT_EQ(body["model"], "reviewer-model");
  EXPECT_EQ(body["temperature"], 0.2);
  EXPECT_EQ(body["reasoning_effort"], "low");
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][0]["content"], "You review code.");
  EXPECT_EQ(body["messages"][1]["content"], "Review this:\n\nx = 1 (cost: $5)");
}

TEST_F(TemplatesTest, ThePromptFollowsAPatternWithoutInput) {
  CliRun run = ask({"-t", "translate", "good morning"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  EXPECT_EQ(lastBody()["messages"][1]["content"], "Translate:\n\ngood morning");
}

TEST_F(TemplatesTest, TheCommandLineWinsOverTheTemplate) {
  CliRun run = ask({"-t", "review", "--system", "Be kind.", "--model", "other", "x"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json body = lastBody();
  EXPECT_EQ(body["model"], "other");
  EXPECT_EQ(body["messages"][0]["content"], "Be kind.");
  EXPECT_EQ(body["temperature"], 0.2);  // the template still gives what the line leaves open
}

TEST_F(TemplatesTest, SaveTemplateWritesATableThatReadsBackAndNeverOverwrites) {
  CliRun saved = ask({"-t", "translate", "--model", "m2", "--tools", "demo", "--save-template",
                      "fr"});
  ASSERT_EQ(saved.exitCode, 0) << saved.err;
  EXPECT_NE(saved.err.find("saved template fr in " + config_), std::string::npos) << saved.err;
  EXPECT_TRUE(server_->requests().empty());  // no prompt: only the template was saved

  CliRun shown = parley({"templates", "show", "--config", config_, "fr"});
  ASSERT_EQ(shown.exitCode, 0) << shown.err;
  EXPECT_EQ(shown.out,
            "[templates.fr]\n"
            "system = \"You translate into French.\"\n"
            "model = \"m2\"\n"
            "tools = [\"demo\"]\n"
            "prompt = \"Translate:\"\n");

  CliRun used = ask({"-t", "fr", "bonjour"});
  ASSERT_EQ(used.exitCode, 0) << used.err;
  EXPECT_EQ(lastBody()["model"], "m2");
  EXPECT_EQ(lastBody()["messages"][1]["content"], "Translate:\n\nbonjour");

  const size_t before = std::filesystem::file_size(config_);
  CliRun again = ask({"--save-template", "fr"});
  EXPECT_EQ(again.exitCode, 2);
  EXPECT_NE(again.err.find("\"fr\" exists in"), std::string::npos) << again.err;
  EXPECT_EQ(std::filesystem::file_size(config_), before);
}

TEST_F(TemplatesTest, ListShowsEveryTemplateAndProfilesStillLoadBesideThem) {
  CliRun listed = parley({"templates", "list", "--config", config_});
  ASSERT_EQ(listed.exitCode, 0) << listed.err;
  EXPECT_EQ(listed.out,
            "review     Code review, terse [reviewer-model]\n"
            "translate  You translate into French.\n");
  CliRun json = parley({"templates", "list", "--config", config_, "--json"});
  ASSERT_EQ(json.exitCode, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out).size(), 2u);

  // [templates] beside [profiles]: --profile still reads the file (its endpoint refuses
  // connections, so the ask fails at the network, not at the config).
  CliRun profile = parley({"ask", "--config", config_, "--profile", "local", "--no-save", "hi"});
  EXPECT_EQ(profile.exitCode, 1) << profile.err;
  EXPECT_EQ(profile.err.find("unknown top-level key"), std::string::npos) << profile.err;
}

TEST_F(TemplatesTest, BadTablesAndNamesAreErrorsNamingTheKey) {
  const std::string bad = write("bad.toml", "[templates.t]\ntools = \"demo\"\n");
  CliRun run = parley({"ask", "--config", bad, "-t", "t", "--no-save", "hi"});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("templates.t.tools: must be an array of strings"), std::string::npos)
      << run.err;

  const std::string unknown = write("unknown.toml", "[templates.t]\nsytem = \"typo\"\n");
  run = parley({"templates", "list", "--config", unknown});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("templates.t.sytem: unknown key"), std::string::npos) << run.err;

  run = ask({"-t", "nope", "hi"});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("no template \"nope\""), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());

  run = parley({"templates", "list", "--config", (dir_ / "missing.toml").string()});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("no config file here"), std::string::npos) << run.err;
}

TEST_F(TemplatesTest, AConfigFileOverItsCapIsRefused) {
  std::string big = "[templates.t]\nsystem = \"" + std::string(1100 * 1024, 'x') + "\"\n";
  const std::string path = write("big.toml", big);
  CliRun run = parley({"templates", "list", "--config", path});
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("larger than 1048576 bytes"), std::string::npos) << run.err;
}

TEST_F(TemplatesTest, ChatTakesATemplateAtStartAndSwitchesWithSlashTemplate) {
  const std::string db = (dir_ / "chat.db").string();
  CliRun run = parley({"chat", "--config", config_, "--base-url", server_->baseUrl(), "--db", db,
                       "-t", "translate"},
                      "hello\n/template review\nx = 2\n/show settings\n/quit\n");
  ASSERT_EQ(run.exitCode, 0) << run.err << run.out;
  const auto& requests = server_->requests();
  ASSERT_EQ(requests.size(), 2u);
  const json first = requests[0]["body"];
  EXPECT_EQ(first["messages"][0]["content"], "You translate into French.");
  EXPECT_EQ(first["messages"].back()["content"], "Translate:\n\nhello");
  const json second = requests[1]["body"];
  EXPECT_EQ(second["messages"][0]["content"], "You review code.");  // the system prompt replaced
  EXPECT_EQ(second["messages"].back()["content"], "Review this:\n\nx = 2 (cost: $5)");
  EXPECT_EQ(second["model"], "reviewer-model");
  EXPECT_EQ(second["temperature"], 0.2);
  EXPECT_EQ(second["reasoning_effort"], "low");
  EXPECT_NE(run.out.find("template review: system prompt set; model reviewer-model;"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("reasoning_effort: \"low\""), std::string::npos) << run.out;
}

}  // namespace
}  // namespace parley
