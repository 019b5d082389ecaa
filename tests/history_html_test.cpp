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
  EXPECT_NE(html.out.find("<p>6.\n</p>\n</div>\n<details class=\"reasoning\"><summary>reasoning"
                          "</summary><pre>Add &lt;3&gt; and 3.</pre></details>"),
            std::string::npos)
      << html.out;
}

// A provider-run web search (Anthropic's blocks, kept whole): folded under the reply to one line
// naming the tool and its query; opened, the input and the result, escaped.
TEST_F(HistoryHtmlTest, ProviderRunToolsAreFoldedToALine) {
  Message searched = Message::assistant("Oslo is at -3C.");
  searched.extra["anthropic_content"] = nlohmann::json::parse(R"([
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
     "input": {"query": "Oslo <weather> today"}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
     "content": [{"type": "web_search_result", "url": "https://yr.no/oslo", "title": "Yr <Oslo>"}]},
    {"type": "text", "text": "Oslo is at -3C."}])");
  {
    auto store = std::shared_ptr<ConversationStore>(openStore(db_));
    store->createThread({.id = "web"},
                        std::vector<Message>{Message::user("Weather in Oslo?"), searched});
  }
  testing::CliRun html =
      testing::runCli({"history", "export", "web", "--format", "html", "--db", db_}, dir_);
  ASSERT_EQ(html.exitCode, 0) << html.err;
  EXPECT_NE(html.out.find("<details class=\"server-tool\"><summary>provider tool "
                          "<code>web_search</code> Oslo &lt;weather&gt; today</summary>"),
            std::string::npos)
      << html.out;
  EXPECT_NE(html.out.find("&quot;title&quot;: &quot;Yr &lt;Oslo&gt;&quot;"), std::string::npos)
      << html.out;
  EXPECT_EQ(html.out.find("<weather>"), std::string::npos);
}

// A reply written to break out of the page: every piece of text escaped, then a small Markdown
// subset made into elements; links only to http(s); each reply's model, time and cost.
TEST_F(HistoryHtmlTest, RendersMarkdownSafelyWithModelTimeAndCostPerReply) {
  Message injected = Message::assistant(
      "# Plan <script>alert(1)</script>\n"
      "Some **bold**, *em* and `code <b>` text.\n"
      "\n"
      "- item one\n"
      "- item [two](https://example.com/a?b=1&c=\"2\")\n"
      "1. first\n"
      "\n"
      "[bad](javascript:alert(1)) and <img src=x onerror=alert(1)>\n"
      "```python\n"
      "if a < b: print(\"<tag>\")\n"
      "```\n");
  injected.model = "priced-model-2026-01-01";
  injected.receivedAt =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(1795167005250));
  injected.usage = TokenUsage{1000, 500, 1500, {}};
  Message unpriced = Message::assistant("second");
  unpriced.model = "nobody-prices-me";
  unpriced.usage = TokenUsage{10, 5, 15, {}};
  {
    auto store = std::shared_ptr<ConversationStore>(openStore(db_));
    store->createThread({.id = "inj", .title = "Injection <test>"},
                        std::vector<Message>{Message::user("Show me **markdown** & <i>tags</i>"),
                                             injected, Message::user("again"), unpriced});
  }
  const auto prices = dir_ / "prices.toml";
  std::ofstream(prices) << "[prices.\"priced-model\"]\ninput = 1.0\noutput = 2.0\n";
  testing::CliRun html = testing::runCli(
      {"history", "export", "inj", "--format", "html", "--db", db_, "--prices", prices.string()},
      dir_);
  ASSERT_EQ(html.exitCode, 0) << html.err;
  const std::string& page = html.out;
  // Nothing the messages held became markup.
  EXPECT_EQ(page.find("<script"), std::string::npos) << page;
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("<i>"), std::string::npos);
  EXPECT_EQ(page.find("javascript:alert(1)\""), std::string::npos);
  EXPECT_EQ(page.find("href=\"javascript"), std::string::npos);
  // The title, escaped, with the id under it; a viewport for phones.
  EXPECT_NE(page.find("<title>Injection &lt;test&gt;</title>"), std::string::npos);
  EXPECT_NE(page.find("<h1>Injection &lt;test&gt;</h1>\n<p class=\"thread-id\">thread "
                      "<code>inj</code></p>"),
            std::string::npos);
  EXPECT_NE(page.find("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"),
            std::string::npos);
  // The Markdown subset, as elements around escaped text.
  EXPECT_NE(page.find("<p>Show me <strong>markdown</strong> &amp; &lt;i&gt;tags&lt;/i&gt;\n</p>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<h3>Plan &lt;script&gt;alert(1)&lt;/script&gt;</h3>\n"
                      "<p>Some <strong>bold</strong>, <em>em</em> and <code>code &lt;b&gt;</code> "
                      "text.\n</p>\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<ul>\n<li>item one</li>\n<li>item <a href=\"https://example.com/"
                      "a?b=1&amp;c=&quot;2&quot;\" rel=\"nofollow noopener noreferrer\">two</a>"
                      "</li>\n</ul>\n<ol>\n<li>first</li>\n</ol>\n"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<p>bad (javascript:alert(1)) and &lt;img src=x onerror=alert(1)&gt;\n</p>\n"
                      "<pre><code class=\"language-python\">if a &lt; b: "
                      "print(&quot;&lt;tag&gt;&quot;)\n</code></pre>\n</div>"),
            std::string::npos)
      << page;
  // Model, time and cost per reply: 1000 input at $1/M + 500 output at $2/M; the other reply's
  // model has no price and says so.
  EXPECT_NE(page.find("<div class=\"meta\"><span class=\"model\">priced-model-2026-01-01</span>"
                      " \u00b7 <time datetime=\"2026-11-20T09:30:05.250Z\">2026-11-20 09:30 UTC"
                      "</time> \u00b7 <span class=\"cost\">$0.002000</span></div>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<div class=\"meta\"><span class=\"model\">nobody-prices-me</span> \u00b7 "
                      "<span class=\"cost unpriced\">unpriced</span></div>"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<p class=\"total-cost\">Cost: $0.002000 + 1 unpriced reply</p>"),
            std::string::npos)
      << page;

  // The Markdown export carries the same per reply.
  testing::CliRun md = testing::runCli({"history", "export", "inj", "--format", "markdown", "--db",
                                        db_, "--prices", prices.string()},
                                       dir_);
  ASSERT_EQ(md.exitCode, 0) << md.err;
  EXPECT_NE(md.out.find("# Injection <test>\n"), std::string::npos) << md.out;
  EXPECT_NE(
      md.out.find("*1000 prompt + 500 completion tokens \u00b7 priced-model-2026-01-01 \u00b7 "
                  "2026-11-20 09:30 UTC \u00b7 $0.002000*"),
      std::string::npos)
      << md.out;
  EXPECT_NE(
      md.out.find("*10 prompt + 5 completion tokens \u00b7 nobody-prices-me \u00b7 unpriced*"),
      std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("Cost: $0.002000 + 1 unpriced reply"), std::string::npos) << md.out;
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
