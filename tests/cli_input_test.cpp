// What a prompt is made of on the command line, and the threads it lands in: piped stdin, -f
// files and directories (caps, binary files), every `ask` saved by default, -c, --no-save,
// `history list` newest first, and the completion scripts. The real binary against the mock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/store.hpp"
#include "png_fixture.hpp"

namespace parley {
namespace {

using nlohmann::json;
using testing::CliRun;

class CliInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    mock::MockOptions options;
    // A title request (thread_title.cpp sends the conversation as "user: ..." lines) gets a
    // title as a model might dress it; every other prompt gets "ok".
    options.script = mock::readScript(
        R"({"match": {"user_regex": "^user: "}, "reply": {"content": "## \"Cats and their habits.\"\nmore", "model": "title-model"}})"
        "\n"
        R"({"reply": {"content": "ok"}})");
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }

  void TearDown() override {
    server_->stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  CliRun ask(std::vector<std::string> args, const std::string& input = "") {
    args.insert(args.begin(), {"ask", "--base-url", server_->baseUrl(), "--no-stream"});
    return testing::runCli(args, dir_ / "scratch", "", input);
  }

  // The user message of the model request number `i`.
  std::string sentPrompt(size_t i) {
    const json body = server_->requests().at(i)["body"];
    return body["messages"].back()["content"].get<std::string>();
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  // The threads of the default database; none when it was never created.
  std::vector<ThreadInfo> storedThreads() {
    const auto path = dir_ / "scratch" / "data" / "parley" / "parley.db";
    if (!std::filesystem::exists(path)) return {};
    return openStore(path.string())->listThreads();
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley-input-test-" + std::to_string(::getpid()));
};

TEST_F(CliInputTest, PipedTextFollowsThePromptOrIsThePrompt) {
  CliRun with = ask({"summarise"}, "line one\nline two\n");
  ASSERT_EQ(with.exitCode, 0) << with.err;
  EXPECT_EQ(sentPrompt(0), "summarise\n\nline one\nline two");

  CliRun alone = ask({}, "just this\n");
  ASSERT_EQ(alone.exitCode, 0) << alone.err;
  EXPECT_EQ(sentPrompt(1), "just this");

  CliRun nothing = ask({}, "");
  EXPECT_EQ(nothing.exitCode, 2);
  EXPECT_NE(nothing.err.find("give a prompt, pipe text in, or add files with -f"),
            std::string::npos)
      << nothing.err;
  EXPECT_EQ(server_->requests().size(), 2u);
}

TEST_F(CliInputTest, AttachSendsFilesAsPartsAndTheThreadKeepsThem) {
  const std::string png = test::makePng(4, 3);
  const std::string image = write("cat.png", png);
  const std::string pdf = write("spec.pdf", "%PDF-1.4 body");
  CliRun run = ask({"--attach", image, "--attach", pdf, "describe"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json content = server_->requests().at(0)["body"]["messages"].back()["content"];
  ASSERT_TRUE(content.is_array()) << content.dump();
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0], json({{"type", "text"}, {"text", "describe"}}));
  EXPECT_EQ(content[1]["image_url"]["url"], "data:image/png;base64," + base64Encode(png));
  EXPECT_EQ(content[2]["file"]["filename"], "spec.pdf");
  // The saved thread holds the parts, bytes and all.
  const auto threads = storedThreads();
  ASSERT_EQ(threads.size(), 1u);
  const auto path = dir_ / "scratch" / "data" / "parley" / "parley.db";
  const std::vector<Message> messages =
      openStore(path.string())->loadThread(threads[0].id).messages;
  ASSERT_GE(messages.size(), 2u);
  const std::vector<Part> parts = partsOf(messages[messages.size() - 2]);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].bytes, png);
  EXPECT_EQ(parts[2].mimeType, "application/pdf");
}

TEST_F(CliInputTest, AttachDashReadsTheAttachmentFromStdin) {
  const std::string png = test::makePng(2, 2);
  CliRun run = ask({"--attach", "-", "what is it"}, png);
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const json content = server_->requests().at(0)["body"]["messages"].back()["content"];
  ASSERT_EQ(content.size(), 2u) << content.dump();
  EXPECT_EQ(content[0]["text"], "what is it");  // stdin was the attachment, not more text
  EXPECT_EQ(content[1]["image_url"]["url"], "data:image/png;base64," + base64Encode(png));
}

TEST_F(CliInputTest, AttachmentsOverTheCapOrMissingAreRefusedBeforeSending) {
  const std::string big = write("big.pdf", "%PDF-" + std::string(20u << 20, 'x'));
  CliRun tooBig = ask({"--attach", big, "read"});
  EXPECT_EQ(tooBig.exitCode, 2);
  EXPECT_NE(tooBig.err.find(big), std::string::npos) << tooBig.err;
  EXPECT_NE(tooBig.err.find("over the cap of 20 MiB"), std::string::npos) << tooBig.err;
  CliRun missing = ask({"--attach", (dir_ / "none.png").string(), "read"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_NE(missing.err.find("none.png"), std::string::npos) << missing.err;
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(CliInputTest, PipedTextOverTheCapIsRefused) {
  CliRun run = ask({"x"}, std::string((8 << 20) + 1, 'a'));
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("stdin: more than the cap of 8 MiB"), std::string::npos) << run.err;
  EXPECT_TRUE(server_->requests().empty());
}

TEST_F(CliInputTest, FilesAndDirectoriesAreFencedAndLabelled) {
  const std::string notes = write("in/notes.txt", "alpha\n");
  write("in/sub/code.cpp", "int x = 1; // ```\n");
  write("in/.hidden", "never sent");
  write("in/image.bin", std::string("\x89PNG\0\0data", 10));
  CliRun run = ask({"-f", (dir_ / "in").string(), "explain"});
  ASSERT_EQ(run.exitCode, 0) << run.err;
  const std::string prompt = sentPrompt(0);
  EXPECT_EQ(prompt.rfind("explain\n\n" + notes + ":\n```\nalpha\n```\n", 0), 0u) << prompt;
  // A fence longer than the backticks inside the file.
  EXPECT_NE(prompt.find("code.cpp:\n````\nint x = 1; // ```\n````"), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find("never sent"), std::string::npos);
  EXPECT_EQ(prompt.find("PNG"), std::string::npos);
  EXPECT_NE(run.err.find("skipped the binary file"), std::string::npos) << run.err;
}

TEST_F(CliInputTest, BadFilesAreClearErrorsAndNothingIsSent) {
  const std::string binary = write("image.bin", std::string("GIF89a\0\0", 8));
  const std::string big = write("big.txt", std::string((1 << 20) + 1, 'b'));
  struct Case {
    std::string path;
    std::string error;
  };
  for (const Case& c :
       {Case{binary, "is a binary file"}, Case{big, "is 1048577 bytes, over the cap of 1 MiB"},
        Case{(dir_ / "missing.txt").string(), "no such file or directory"}}) {
    SCOPED_TRACE(c.path);
    CliRun run = ask({"-f", c.path, "read it"});
    EXPECT_EQ(run.exitCode, 2);
    EXPECT_NE(run.err.find(c.path + ": " + c.error), std::string::npos) << run.err;
  }
  EXPECT_TRUE(server_->requests().empty());
  EXPECT_TRUE(storedThreads().empty());
}

TEST_F(CliInputTest, EveryAskIsSavedAndDashCContinuesTheLastThread) {
  ASSERT_EQ(ask({"first question about cats"}).exitCode, 0);
  ASSERT_EQ(ask({"another topic entirely"}).exitCode, 0);
  CliRun more = ask({"-c", "and more"});
  ASSERT_EQ(more.exitCode, 0) << more.err;

  auto threads = storedThreads();
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].title, "first question about cats");
  EXPECT_EQ(threads[1].title, "another topic entirely");
  EXPECT_EQ(threads[0].messageCount, 2);
  EXPECT_EQ(threads[1].messageCount, 4);  // -c went to the thread used last
  const json sent = server_->requests().at(2)["body"]["messages"];
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0]["content"], "another topic entirely");

  CliRun list = testing::runCli({"history", "list"}, dir_ / "scratch");
  ASSERT_EQ(list.exitCode, 0) << list.err;
  EXPECT_LT(list.out.find("another topic entirely"), list.out.find("first question about cats"))
      << list.out;
}

TEST_F(CliInputTest, NoSaveKeepsNothingAndAFailedTurnLeavesNoThread) {
  ASSERT_EQ(ask({"--no-save", "private"}).exitCode, 0);
  EXPECT_TRUE(storedThreads().empty());

  CliRun nothingToContinue = ask({"-c", "hello"});
  EXPECT_EQ(nothingToContinue.exitCode, 2);
  EXPECT_NE(nothingToContinue.err.find("no stored thread to continue"), std::string::npos);

  CliRun failed = testing::runCli({"ask", "--base-url", "http://127.0.0.1:1/v1", "--no-stream",
                                   "--timeout", "2000", "unreachable"},
                                  dir_ / "scratch");
  EXPECT_EQ(failed.exitCode, 1);
  EXPECT_TRUE(storedThreads().empty());

  CliRun both = ask({"--no-save", "--thread", "t1", "x"});
  EXPECT_EQ(both.exitCode, 2);
  EXPECT_NE(both.err.find("--no-save"), std::string::npos);
}

TEST_F(CliInputTest, LongPromptsGiveShortTitles) {
  const std::string prompt =
      "Please write a detailed comparison of the three approaches we discussed yesterday\nmore";
  ASSERT_EQ(ask({prompt}).exitCode, 0);
  const auto threads = storedThreads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].title, "Please write a detailed comparison of the three approaches...");
}

TEST_F(CliInputTest, RepliesKeepTheirModelAndTimeAndTitlesCanBeProposed) {
  const auto before =
      std::chrono::floor<std::chrono::milliseconds>(std::chrono::system_clock::now());
  ASSERT_EQ(ask({"--model", "gpt-4o-mini", "first question about cats"}).exitCode, 0);
  const auto after = std::chrono::system_clock::now();
  auto threads = storedThreads();
  ASSERT_EQ(threads.size(), 1u);
  const std::string id = threads[0].id;
  EXPECT_EQ(threads[0].title, "first question about cats");  // the default: the prompt's start
  const auto db = (dir_ / "scratch" / "data" / "parley" / "parley.db").string();
  const Message reply = openStore(db)->loadThread(id).messages.back();
  EXPECT_EQ(reply.model, "gpt-4o-mini");  // as the server named it
  ASSERT_TRUE(reply.receivedAt.has_value());
  EXPECT_GE(*reply.receivedAt, before);
  EXPECT_LE(*reply.receivedAt, after);

  const size_t sent = server_->requests().size();
  CliRun titled = testing::runCli(
      {"history", "title", id, "--generate", "--base-url", server_->baseUrl()}, dir_ / "scratch");
  ASSERT_EQ(titled.exitCode, 0) << titled.err;
  EXPECT_EQ(titled.out, "Cats and their habits\n");
  EXPECT_EQ(storedThreads()[0].title, "Cats and their habits");
  ASSERT_EQ(server_->requests().size(), sent + 1);
  const json request = server_->requests().back()["body"];
  EXPECT_NE(request["messages"][0]["content"].get<std::string>().find("title"), std::string::npos);
  EXPECT_EQ(request["messages"][1]["content"],
            "user: first question about cats\n\nassistant: ok\n\n");
  // Asking for a title is not a turn: the thread's messages are as they were.
  EXPECT_EQ(storedThreads()[0].messageCount, 2);

  CliRun own = testing::runCli({"history", "title", id, "Feline notes"}, dir_ / "scratch");
  ASSERT_EQ(own.exitCode, 0) << own.err;
  EXPECT_EQ(storedThreads()[0].title, "Feline notes");
  CliRun neither = testing::runCli({"history", "title", id}, dir_ / "scratch");
  EXPECT_EQ(neither.exitCode, 2);
  EXPECT_NE(neither.err.find("give either a TITLE or --generate"), std::string::npos)
      << neither.err;
  CliRun missing = testing::runCli({"history", "title", "nope", "x"}, dir_ / "scratch");
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("no thread \"nope\""), std::string::npos) << missing.err;
  EXPECT_EQ(storedThreads()[0].title, "Feline notes");
}

TEST_F(CliInputTest, CompletionScriptsListTheCommandsAndOptions) {
  CliRun bash = testing::runCli({"completion", "bash"}, dir_ / "scratch");
  ASSERT_EQ(bash.exitCode, 0) << bash.err;
  const auto script = write("parley.bash", bash.out);
  // Syntax, then what it completes, in a real bash.
  EXPECT_EQ(std::system(("bash -n " + testing::shellQuote(script)).c_str()), 0);
  const std::string probe = "bash -c " +
                            testing::shellQuote("source " + script +
                                                "; COMP_WORDS=(parley history l); COMP_CWORD=2; "
                                                "_parley; echo \"${COMPREPLY[*]}\"; "
                                                "COMP_WORDS=(parley ask --no-s); COMP_CWORD=2; "
                                                "_parley; echo \"${COMPREPLY[*]}\"") +
                            " > " + testing::shellQuote((dir_ / "probe.txt").string());
  ASSERT_EQ(std::system(probe.c_str()), 0);
  std::ifstream in(dir_ / "probe.txt");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "list");
  EXPECT_EQ(second, "--no-stream --no-save");

  CliRun fish = testing::runCli({"completion", "fish"}, dir_ / "scratch");
  ASSERT_EQ(fish.exitCode, 0);
  EXPECT_NE(fish.out.find("complete -c parley -n '__fish_seen_subcommand_from ask' -l no-save"),
            std::string::npos)
      << fish.out;
  CliRun zsh = testing::runCli({"completion", "zsh"}, dir_ / "scratch");
  ASSERT_EQ(zsh.exitCode, 0);
  EXPECT_EQ(zsh.out.rfind("autoload -U +X bashcompinit && bashcompinit\n", 0), 0u);
  CliRun bad = testing::runCli({"completion", "tcsh"}, dir_ / "scratch");
  EXPECT_EQ(bad.exitCode, 2);
}

}  // namespace
}  // namespace parley
