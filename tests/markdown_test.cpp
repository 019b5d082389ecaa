// Replies rendered for reading (apps/parley/markdown.hpp): each Markdown construct with and
// without styles, wrapping at word boundaries (wide characters count two), a stream split
// anywhere renders as the whole does, and replies built to make rendering slow or deep.
// Then `parley ask --format/--color` and NO_COLOR through the real binary.
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "markdown.hpp"
#include "mock/mock_server.hpp"
#include "mock/script.hpp"

namespace parley::cli {
namespace {

std::string render(std::string_view text, bool color, size_t width = 0) {
  MarkdownRenderer renderer({.color = color, .width = width});
  std::string out = renderer.feed(text);
  return out + renderer.finish();
}

TEST(Markdown, PlainTextTakesTheMarkersOut) {
  EXPECT_EQ(render("# Title\nSome **bold**, *italic*, `code` and ~~gone~~.\n", false),
            "Title\nSome bold, italic, code and gone.\n");
  EXPECT_EQ(render("- one\n- two\n  - nested\n1. first\n", false),
            "- one\n- two\n  - nested\n1. first\n");
  EXPECT_EQ(
      render("> quoted *text*\n---\n", false), "\u2502 quoted text\n" + [] {
        std::string r;
        for (int i = 0; i < 40; ++i)
          r += "\u2500";
        return r;
      }() + "\n");
  EXPECT_EQ(render("see [the docs](https://x.y/z) and [https://a.b](https://a.b)\n", false),
            "see the docs (https://x.y/z) and https://a.b\n");
  // What is not emphasis stays as typed.
  EXPECT_EQ(render("snake_case_name, 2 * 3 * 4, a ** b, \\*literal\\*\n", false),
            "snake_case_name, 2 * 3 * 4, a ** b, *literal*\n");
}

TEST(Markdown, CodeBlocksAndTablesAreKeptAsWritten) {
  const std::string text =
      "```cpp\nint  main()  { return *p * 2; }   // **not bold**\n```\n| a | **b** |\n";
  EXPECT_EQ(render(text, false, 20), text);
  const std::string colored = render(text, true, 20);
  EXPECT_NE(colored.find("\033[36mint  main()  { return *p * 2; }   // **not bold**\033[39m"),
            std::string::npos)
      << colored;
  EXPECT_NE(colored.find("| a | **b** |"), std::string::npos);
}

TEST(Markdown, StylesAreTerminalSequencesThatCloseWhatTheyOpen) {
  EXPECT_EQ(render("**b** *i* `c`", true), "\033[1mb\033[22m \033[3mi\033[23m \033[36mc\033[39m");
  EXPECT_EQ(render("# H1\n## H2", true), "\033[1;4mH1\033[22;24m\n\033[1mH2\033[22m");
  EXPECT_EQ(render("- item", true), "\033[2m\u2022\033[22m item");
  EXPECT_EQ(render("***both*** and **outer *inner* outer**", true),
            "\033[1;3mboth\033[22;23m and \033[1mouter \033[3minner\033[23m outer\033[22m");
}

TEST(Markdown, WrapsAtWordBoundariesWithHangingIndents) {
  EXPECT_EQ(render("the quick brown fox jumps over the lazy dog\n", false, 16),
            "the quick brown\nfox jumps over\nthe lazy dog\n");
  EXPECT_EQ(render("- the quick brown fox jumps\n", false, 12),
            "- the quick\n  brown fox\n  jumps\n");
  EXPECT_EQ(render("a https://example.com/a/very/long/path b\n", false, 10),
            "a\nhttps://example.com/a/very/long/path\nb\n");
  // Styles take no room; wide characters take two columns.
  EXPECT_EQ(render("**aaaa** **bbbb**", true, 9), "\033[1maaaa\033[22m \033[1mbbbb\033[22m");
  EXPECT_EQ(render("日本語 日本語", false, 10), "日本語\n日本語");
  EXPECT_EQ(displayWidth("\033[1m日本\033[22mab"), 6u);
}

TEST(Markdown, AStreamSplitAnywhereRendersAsTheWhole) {
  const std::string text =
      "# Plan\n\nFirst **do this**, then `that`.\n\n```sh\nmake -j2\n```\n- a *b*\n> end";
  const std::string whole = render(text, true, 30);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    MarkdownRenderer renderer({.color = true, .width = 30});
    std::string out = renderer.feed(text.substr(0, cut));
    out += renderer.feed(text.substr(cut));
    out += renderer.finish();
    ASSERT_EQ(out, whole) << "cut at " << cut;
  }
}

// A JSON reply (--json-mode, or a model answering in JSON) is shown as written: Markdown's
// backslash escapes would take the backslashes out of its strings.
TEST(Markdown, AJsonReplyKeepsItsBackslashes) {
  const std::string json = "{\"path\": \"C:\\\\temp\", \"quote\": \"say \\\"hi\\\"\",\n \"n\": 1}";
  EXPECT_EQ(render(json, false, 20), json);
  EXPECT_EQ(render("[{\"a\": \"x\\\\y\"}]", false), "[{\"a\": \"x\\\\y\"}]");
  // Prose still loses the escapes, and a link is no JSON.
  EXPECT_EQ(render("a \\*star\\*", false), "a *star*");
  EXPECT_EQ(render("[see](http://x) \\*", false).find("\\"), std::string::npos);
}

// On a terminal the line in progress is shown as it streams, and taken back (cursor to its
// start, erase to the end of the screen) to be shown again, longer, or replaced by its whole line.
TEST(Markdown, LiveShowsTheLineInProgressAndRendersItAgain) {
  LiveMarkdown live({.color = false, .width = 10}, 10);
  EXPECT_EQ(live.feed("Alpha"), "Alpha");
  EXPECT_EQ(live.feed(" **beta**"), "\r\033[JAlpha beta");
  // "Alpha beta gamma" wraps to two rows of 10: taken back from the first row.
  EXPECT_EQ(live.feed(" gamma"), "\r\033[JAlpha beta\ngamma");
  EXPECT_EQ(live.feed(" end\nnext"), "\r\033[1A\033[JAlpha beta\ngamma end\nnext");
  EXPECT_EQ(live.finish(), "\r\033[Jnext");
  // Not a terminal: whole lines only.
  LiveMarkdown lines({.color = false, .width = 10}, 0);
  EXPECT_EQ(lines.feed("Alpha"), "");
  EXPECT_EQ(lines.feed(" beta\nx"), "Alpha beta\n");
  EXPECT_EQ(lines.finish(), "x");
}

TEST(Markdown, HostileRepliesRenderQuicklyAndShallowly) {
  // 200 000 openers that never close, emphasis nested 100 000 deep, 100 000 brackets before one
  // link: left as typed past the limits (a quadratic search would take the test past its
  // timeout; deep recursion would overflow the stack).
  std::string openers;
  for (int i = 0; i < 200'000; ++i)
    openers += "*a ";
  std::string nested(100'000, '*');
  nested += "x";
  nested += std::string(100'000, '*');
  const std::string a = render(openers, true, 80);
  const std::string b = render(nested, true, 80);
  const std::string c = render(std::string(100'000, '[') + "x](u)", false, 0);
  EXPECT_EQ(c, std::string(99'999, '[') + "x (u)");
  EXPECT_FALSE(a.empty());
  EXPECT_NE(b.find('x'), std::string::npos);
}

std::string html(std::string_view text) {
  MarkdownRenderer renderer({.html = true});
  std::string out = renderer.feed(text);
  return out + renderer.finish();
}

TEST(MarkdownHtml, EscapesFirstThenMakesTheSubsetsElements) {
  EXPECT_EQ(html("a <b> & \"c\" 'd'"), "<p>a &lt;b&gt; &amp; &quot;c&quot; &#39;d&#39;\n</p>\n");
  EXPECT_EQ(html("> quoted *x*\n> more\n\n---\n| a | b |\n| <i> | 2 |\n"),
            "<blockquote>quoted <em>x</em>\nmore\n</blockquote>\n<hr>\n"
            "<pre class=\"table\">| a | b |\n| &lt;i&gt; | 2 |\n</pre>\n");
  EXPECT_EQ(
      html("**b** ~~s~~ ***both*** `a<b`\n"),
      "<p><strong>b</strong> <del>s</del> <strong><em>both</em></strong> <code>a&lt;b</code>\n"
      "</p>\n");
  // A fence left open is closed; its info string is a class, escaped.
  EXPECT_EQ(html("```c\" onclick=\"x\n<int>"),
            "<pre><code class=\"language-c&quot;\">&lt;int&gt;\n</code></pre>\n");
  // Links: http(s) only, the address escaped in its attribute; anything else stays text.
  EXPECT_EQ(html("[x](https://a.example/?q=\"><script>)"),
            "<p><a href=\"https://a.example/?q=&quot;&gt;&lt;script&gt;\" "
            "rel=\"nofollow noopener noreferrer\">x</a>\n</p>\n");
  for (const char* bad : {"[x](javascript:alert(1))", "[x](data:text/html,hi)", "[x](JAVASCRIPT:y)",
                          "[x](//evil.example)", "[x](http://a b)"}) {
    EXPECT_EQ(html(bad).find("href"), std::string::npos) << bad;
  }
  EXPECT_NE(html("[x](HTTPS://A.example)").find("<a href=\"HTTPS://A.example\""),
            std::string::npos);
  // Headings two levels down (the page's h1 and h2 are the title and the turns).
  EXPECT_EQ(html("# a\n###### f\n"), "<h3>a</h3>\n<h6>f</h6>\n");
}

TEST(MarkdownHtml, AStreamSplitAnywhereRendersAsTheWhole) {
  const std::string text =
      "# Plan\n\nFirst **do this**, then `that`.\n\n```sh\nmake <x>\n```\n- a *b*\n1. one\n> end";
  const std::string whole = html(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    MarkdownRenderer renderer({.html = true});
    std::string out = renderer.feed(text.substr(0, cut));
    out += renderer.feed(text.substr(cut));
    out += renderer.finish();
    ASSERT_EQ(out, whole) << "cut at " << cut;
  }
}

class AskFormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(
        R"({"reply": {"content": "# Result\nThe **answer** is `42`, which the whole team agreed on after a long meeting.\n"}})");
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }
  void TearDown() override { server_->stop(); }

  testing::CliRun ask(std::vector<std::string> args, const std::string& env = "") {
    args.insert(args.begin(), {"ask", "--base-url", server_->baseUrl(), "--no-save"});
    args.push_back("q");
    return testing::runCli(args, scratch_, env);
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path scratch_ =
      std::filesystem::temp_directory_path() / ("parley_format_" + std::to_string(::getpid()));
};

TEST_F(AskFormatTest, APipeGetsTheMarkdownAsWrittenAndTextIsRenderedAndWrapped) {
  testing::CliRun raw = ask({});
  ASSERT_EQ(raw.exitCode, 0) << raw.err;
  EXPECT_EQ(raw.out,
            "# Result\nThe **answer** is `42`, which the whole team agreed on after a long "
            "meeting.\n");
  for (const char* stream : {"--stream", "--no-stream"}) {
    testing::CliRun text = ask({stream, "--format", "text"}, "COLUMNS=40");
    ASSERT_EQ(text.exitCode, 0) << text.err;
    EXPECT_EQ(text.out,
              "Result\nThe answer is 42, which the whole team\nagreed on after a long meeting.\n")
        << stream;
  }
}

TEST_F(AskFormatTest, ColorIsAskedForOrRefusedAndNoColorWins) {
  testing::CliRun always = ask({"--format", "text", "--color", "always"}, "COLUMNS=200");
  ASSERT_EQ(always.exitCode, 0) << always.err;
  EXPECT_NE(always.out.find("\033[1manswer\033[22m"), std::string::npos) << always.out;
  // auto: not a terminal here, so none; NO_COLOR would say the same on a terminal.
  testing::CliRun automatic = ask({"--format", "text"}, "NO_COLOR=1");
  EXPECT_EQ(automatic.out.find('\033'), std::string::npos) << automatic.out;
  testing::CliRun bad = ask({"--color", "sometimes"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("--color: must be auto, always or never"), std::string::npos) << bad.err;
  testing::CliRun clash = ask({"--json", "--format", "text"});
  EXPECT_EQ(clash.exitCode, 2);
  testing::CliRun json = ask({"--format", "json"});
  ASSERT_EQ(json.exitCode, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["finish_reason"], "stop");
  EXPECT_EQ(server_->requests().size(), 3u);  // the refused command lines sent nothing
}

TEST_F(AskFormatTest, ChatRendersRepliesWhenAskedAndPipesTheMarkdownOtherwise) {
  const std::string db = (scratch_ / "chat.db").string();
  testing::CliRun rendered = testing::runCli({"chat", "--base-url", server_->baseUrl(), "--db", db,
                                              "--format", "text", "--color", "always"},
                                             scratch_, "COLUMNS=200", "hi\n/quit\n");
  ASSERT_EQ(rendered.exitCode, 0) << rendered.err;
  EXPECT_NE(rendered.out.find("\033[1;4mResult\033[22;24m\nThe \033[1manswer\033[22m is "
                              "\033[36m42\033[39m"),
            std::string::npos)
      << rendered.out;
  testing::CliRun raw = testing::runCli({"chat", "--base-url", server_->baseUrl(), "--db", db},
                                        scratch_, "", "hi\n/quit\n");
  ASSERT_EQ(raw.exitCode, 0) << raw.err;
  EXPECT_NE(raw.out.find("# Result\nThe **answer** is `42`"), std::string::npos) << raw.out;
}

}  // namespace
}  // namespace parley::cli
