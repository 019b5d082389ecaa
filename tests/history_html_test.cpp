// `parley history export --format html` opened in a real browser: headless Chromium (Debian's
// `chromium`, installed by scripts/setup.sh) loads the page and dumps the DOM it built, and the
// test reads the turns, the folded tool results, the hidden messages and the usage bars from
// that DOM, so what is checked is what a browser shows, not the bytes parley wrote.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli_runner.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"

namespace parley {
namespace {

Message reply(std::string content, int64_t prompt, int64_t completion,
              std::vector<ToolCall> calls = {}) {
  Message m = Message::assistant(std::move(content), std::move(calls));
  m.usage = TokenUsage{prompt, completion, prompt + completion, {}};
  return m;
}

std::string findChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string probe = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

// The sections of the DOM, each from "<section" to its "</section>".
std::vector<std::string> sections(const std::string& dom) {
  std::vector<std::string> out;
  for (size_t at = dom.find("<section"); at != std::string::npos;
       at = dom.find("<section", at + 1)) {
    const size_t end = dom.find("</section>", at);
    if (end == std::string::npos) break;
    out.push_back(dom.substr(at, end - at));
  }
  return out;
}

class HistoryHtmlTest : public ::testing::Test {
 protected:
  // Two turns with per-reply usage; the first turn's text hidden by a context operation.
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    {
      ConversationManager conversation;
      conversation.addMessage(Message::system("You are terse."));
      conversation.addMessage(Message::user("Is <b>2+2</b> four?"));
      conversation.addMessage(
          reply("", 40, 10, {ToolCall{"call_1", "calculate", R"({"expression":"2+2"})"}}));
      conversation.addMessage(Message::tool("call_1", R"({"result":4})"));
      conversation.addMessage(reply("Yes, it is 4.", 60, 20));
      conversation.addMessage(Message::user("And 3+3?"));
      Message six = reply("6.", 20, 5);
      six.extra["reasoning_content"] = "Add <3> and 3.";
      conversation.addMessage(six);
      // Hide the first turn's text from the view: the page must still show it, marked.
      applyContextOperation(conversation,
                            parseContextOperation(nlohmann::json::parse(
                                R"({"operation":"truncate","truncate":{"keepLast":3}})")));
      auto store = std::shared_ptr<ConversationStore>(openStore(db_));
      StoredThread thread(store, "t1");
      thread.attach(conversation);
      thread.save(conversation);
    }
  }

  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("parley-history-html-" + std::to_string(::getpid()));
  std::string db_ = (dir_ / "history.db").string();
};

TEST_F(HistoryHtmlTest, MarkdownCarriesEachReplysUsage) {
  testing::CliRun md =
      testing::runCli({"history", "export", "t1", "--format", "markdown", "--db", db_}, dir_);
  ASSERT_EQ(md.exitCode, 0) << md.err;
  EXPECT_NE(md.out.find("Yes, it is 4.\n\n*60 prompt + 20 completion tokens*"), std::string::npos)
      << md.out;
}

TEST_F(HistoryHtmlTest, ReasoningIsFoldedUnderTheReply) {
  testing::CliRun html =
      testing::runCli({"history", "export", "t1", "--format", "html", "--db", db_}, dir_);
  ASSERT_EQ(html.exitCode, 0) << html.err;
  EXPECT_NE(html.out.find("<pre>6.</pre>\n<details class=\"reasoning\"><summary>reasoning</summary>"
                          "<pre>Add &lt;3&gt; and 3.</pre></details>"),
            std::string::npos)
      << html.out;
}

TEST_F(HistoryHtmlTest, ChromiumShowsTheTurnsToolResultsHiddenMessagesAndUsageBars) {
  const std::string chromium = findChromium();
  ASSERT_FALSE(chromium.empty()) << "no chromium on PATH: scripts/setup.sh installs Debian's";
  testing::CliRun html =
      testing::runCli({"history", "export", "t1", "--format", "html", "--db", db_}, dir_);
  ASSERT_EQ(html.exitCode, 0) << html.err;
  const auto page = dir_ / "t1.html";
  std::ofstream(page) << html.out;

  const auto domFile = dir_ / "dom.html";
  const std::string command =
      chromium +
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
      " --disable-background-networking --disable-extensions --user-data-dir=" +
      testing::shellQuote((dir_ / "profile").string()) + " --dump-dom " +
      testing::shellQuote("file://" + page.string()) + " >" +
      testing::shellQuote(domFile.string()) + " 2>" +
      testing::shellQuote((dir_ / "chromium.log").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << "chromium failed; see its log in " << dir_;
  std::ifstream in(domFile);
  const std::string dom((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(dom.find("</html>"), std::string::npos) << dom;

  // The preamble (system prompt) and two turns, each holding its own messages.
  const std::vector<std::string> parts = sections(dom);
  ASSERT_EQ(parts.size(), 3u) << dom;
  EXPECT_NE(parts[0].find("class=\"preamble\""), std::string::npos) << parts[0];
  EXPECT_NE(parts[0].find("You are terse."), std::string::npos);
  EXPECT_NE(parts[1].find("class=\"turn\""), std::string::npos) << parts[1];
  // The browser decoded the escaped text and built no <b> element from it.
  EXPECT_NE(parts[1].find("Is &lt;b&gt;2+2&lt;/b&gt; four?"), std::string::npos) << parts[1];
  EXPECT_EQ(dom.find("<b>"), std::string::npos);
  EXPECT_NE(parts[1].find("Yes, it is 4."), std::string::npos);
  EXPECT_EQ(parts[1].find("And 3+3?"), std::string::npos);
  EXPECT_NE(parts[2].find("And 3+3?"), std::string::npos) << parts[2];
  EXPECT_NE(parts[2].find("6."), std::string::npos);

  // The tool result sits inside the call's <details>, not as a message of its own.
  const size_t details = parts[1].find("<details>");
  ASSERT_NE(details, std::string::npos) << parts[1];
  const std::string folded = parts[1].substr(details, parts[1].find("</details>") - details);
  EXPECT_NE(folded.find("calculate"), std::string::npos) << folded;
  EXPECT_NE(folded.find(R"({"result":4})"), std::string::npos) << folded;
  EXPECT_EQ(parts[1].find("class=\"msg tool"), std::string::npos) << parts[1];

  // truncate keepLast 3 left the second turn and "Yes, it is 4." in view: the first turn's
  // user message and tool-call message are hidden and say so; the second turn is not.
  EXPECT_NE(parts[1].find("class=\"msg user hidden\""), std::string::npos) << parts[1];
  EXPECT_NE(parts[1].find("hidden by a context operation"), std::string::npos);
  EXPECT_EQ(parts[2].find("hidden"), std::string::npos) << parts[2];

  // Usage bars per turn, scaled to the largest turn: turn 1 is 100+30 tokens, turn 2 is 20+5.
  const std::regex bar(R"re(class="bar (prompt|completion)"[^>]*style="width: ?([0-9.]+)%)re");
  std::vector<std::pair<std::string, double>> bars[2];
  for (int t = 0; t < 2; ++t) {
    for (std::sregex_iterator it(parts[t + 1].begin(), parts[t + 1].end(), bar), end; it != end;
         ++it) {
      bars[t].emplace_back((*it)[1], std::stod((*it)[2]));
    }
    ASSERT_EQ(bars[t].size(), 2u) << parts[t + 1];
  }
  EXPECT_NEAR(bars[0][0].second + bars[0][1].second, 100.0, 0.01);
  EXPECT_NEAR(bars[0][0].second, 100.0 * 100 / 130, 0.01);
  EXPECT_NEAR(bars[1][0].second, 100.0 * 20 / 130, 0.01);
  EXPECT_NEAR(bars[1][1].second, 100.0 * 5 / 130, 0.01);
  EXPECT_NE(parts[1].find("100 prompt + 30 completion = 130 tokens over 2 calls"),
            std::string::npos)
      << parts[1];
}

}  // namespace
}  // namespace parley
