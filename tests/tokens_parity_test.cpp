// Parity with OpenAI's tiktoken: the same corpus is encoded by parley and by the npm `tiktoken`
// package (installed at test set-up by tests/node/setup.sh), and the ids must be identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/bpe.hpp"
#include "parley/tokens.hpp"

namespace fs = std::filesystem;
using parley::TokenId;

namespace {

const std::vector<std::string> kEncodings = {"cl100k_base", "o200k_base"};

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeFile(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << p;
}

std::vector<TokenId> readIds(const fs::path& p) {
  std::string bytes = readFile(p);
  std::vector<TokenId> ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

// A deterministic pseudo-random generator (the corpus must be the same on every run: the
// reference's results are cached by content).
struct Lcg {
  uint64_t state;
  uint32_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  }
};

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Text written for the test: many scripts, and the corners of the split patterns.
const char* kHandwritten =
    R"(English: The quick brown fox doesn't jump; it's lazy. WE'LL SEE, THEY'RE HERE, I'M SURE.
They'Re, you'VE, she'D, it'S, 'tis, rock'n'roll, O'Neil's, don’t (typographic apostrophe).
Deutsch: Größenwahn, Straße, Übermäßig. Français: déjà vu, garçon, cœur, naïve façade.
Español: ¿Dónde está el niño? ¡Olé! Português: ação, coração. Polski: Zażółć gęślą jaźń.
Русский: Съешь же ещё этих мягких французских булок, да выпей чаю. Ελληνικά: Γειά σου Κόσμε.
עברית: שלום עולם. العربية: مرحبا بالعالم، ١٢٣٤٥٦٧٨٩٠. فارسی: سلام دنیا ۱۲۳۴.
हिन्दी: नमस्ते दुनिया, क्षत्रिय, हिन्दी। বাংলা: আমার সোনার বাংলা। தமிழ்: வணக்கம் உலகம்.
ไทย: สวัสดีชาวโลก ภาษาไทย. ລາວ: ສະບາຍດີ. ქართული: გამარჯობა. Հայերեն: Բարեւ աշխարհ.
中文: 你好，世界！我们在测试分词器。繁體中文：這是一個測試。 日本語: こんにちは世界、カタカナとひらがな、漢字。
한국어: 안녕하세요 세계, 토큰화 테스트입니다. Tiếng Việt: Xin chào thế giới, tiếng Việt có dấu.
Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪🇯🇵 ❤️‍🔥 🧑🏿‍💻 1️⃣ #️⃣ ©️ ™ ✔︎
Math: ∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ = ½, ∞ ≠ 0, Ⅻ Ⅳ ⅷ, ① ② ③, ¹²³, π≈3.14159.
Letters of every kind: ǅungla ǈubljana ǋove (titlecase), ʰʲʷ ˢᵘᵖ (modifier), ﬁnance ﬂow (ligatures),
é vs é, ä́, Å Å Å, ℌ𝔢𝔩𝔩𝔬 𝐁𝐨𝐥𝐝 𝓢𝓬𝓻𝓲𝓹𝓽, ꜱᴍᴀʟʟ ᴄᴀᴘꜱ, İstanbul ıi, ß ẞ, ſ 'ſ 'ſt.
Case runs: HTTPServer XMLHttpRequest iPhone McDonald's NASA's DÉJÀ'S ABCdef abcDEF aBcDeF ǄǅǆDž
日本Japan 中文ABC ʰA ʰa ーA ーa ΑΒΓ中 ΣΊΣΥΦΟΣ straße STRASSE İİi ıI 'S'LL'VE 'ſ'ſt 'ſtreet X'ſ
Marks alone: ́ ̈ ͅ and after digits 1́ 2̈, after spaces  ́x, Devanagari: कि की कु कू के कै को कौ कं कः.
Spaces: a b  c   d    e	f		g
h
i

j


k   
  l 
 m  	 n​o‌p‍q r s　t u v x y z
Line endings: one
two
three three
four
trailing spaces   
    indented code block
	tabbed	values	here
/path/to/file.txt //comment /* block */ http://example.com/a/b?c=d&e=f#g
Numbers: 0 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0x1F 1e-10 -42 +7 007 ٣٤٥ ۴۵۶ १२३ ௧௨௩
Punctuation: !!! ??? ... --- *** ### $$$ %%% ^^^ &&& ((())) [[[]]] {{{}}} <<<>>> ||| \\\ ~~~ ``` '''
"quotes" 'single' «guillemets» „Anführungszeichen“ 「かぎかっこ」 — – ‐ … · • ※
)";

const char* kCode = R"(#include <vector>
int main(int argc, char** argv) {
    std::vector<int> v{1, 2, 3};
    for (auto& x : v) { x *= 2; }  // double
    if (argc > 1 && argv[1][0] == '-') return 1;
    return 0;
}
def f(x):
    """Docstring with 'quotes' and "double"."""
    return {k: v for k, v in x.items() if v is not None}

SELECT id, name FROM users WHERE name LIKE '%o''brien%' ORDER BY id DESC;
{"key": "value", "list": [1, 2.5, null, true], "nested": {"a": "\u00e9"}}
<html><body class="main"><p>Hello&nbsp;world</p></body></html>
)";

std::string adversarialRuns() {
  std::string s;
  s += std::string(10000, '7') + "\n";
  s += "1234567890" + std::string(999, '0') + "x9\n";
  s += std::string(5000, ' ') + "word\n";
  s += std::string(3000, '\n') + "after newlines";
  s += std::string(2000, '\t') + " \t \n \r\n" + std::string(100, ' ');
  for (int i = 0; i < 500; ++i)
    s += " \n";
  for (int i = 0; i < 500; ++i)
    s += "\r\n  ";
  s += "x" + std::string(1000, ' ') + "\n" + std::string(1000, ' ');
  s += "\u3000\u3000\u3000x\u00a0\u00a0y\u2028\u2029z\u0085\u000b\u000c end";
  for (const char* c : {"'s", "'S",  "'t",  "'T",  "'re", "'RE", "'rE", "'Re", "'ve", "'VE", "'m",
                        "'M", "'ll", "'LL", "'lL", "'d",  "'D",  "'l",  "'r",  "'v",  "'x",  "'"}) {
    s += std::string("it") + c + " " + c + " " + c + "abc " + "X" + c + "Y\n";
  }
  s += "''''''''''s'''t\n";
  s += std::string(2000, '!') + "\n" + std::string(500, '/') + "\n";
  std::string cjk;
  for (int i = 0; i < 3000; ++i)
    cjk += utf8(0x4E00 + (i * 7919) % 20000);
  s += cjk + "\n";
  std::string emoji;
  for (int i = 0; i < 300; ++i)
    emoji += "👨‍👩‍👧‍👦🏳️‍🌈👍🏽";
  s += emoji + "\n";
  s += std::string(20000, 'q') + "\n";  // a long word, short enough for the reference's time
  return s;
}

// Random text over a palette touching every class the split patterns distinguish.
std::string randomText(uint64_t seed, size_t chars) {
  static const std::vector<std::string> palette = [] {
    std::vector<std::string> p;
    for (const char* a : {"a",  "b", "z",  "A",   "Q", "0", "5", "9", " ", " ", " ", "\n", "\r",
                          "\t", "'", "'s", "'LL", "/", ".", ",", "!", "-", "_", "(", "\"", "\v"}) {
      p.push_back(a);
    }
    for (char32_t c :
         {U'é',      U'ß',      U'Ж',  U'ж',      U'ǅ',          U'ʰ',         U'中',
          U'あ',     U'ア',     U'한', U'ก',      U'\u0301',     U'\u0308',    U'\u093f',
          U'\u0e31', U'Ⅻ',      U'²',  U'½',      U'٣',          U'\u00a0',    U'\u3000',
          U'\u2028', U'\u0085', U'😀',  U'\u200d', U'\ufe0f',     U'🏽',      U'€',
          U'→',      U'ſ',      U'İ',  U'ı',      U'\U0001d400', U'\U00020000'}) {
      p.push_back(utf8(c));
    }
    return p;
  }();
  Lcg rng{seed};
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    // Runs of the same kind are what the patterns care about: repeat a pick sometimes.
    const std::string& pick = palette[rng.next() % palette.size()];
    size_t repeat = rng.next() % 8 == 0 ? 1 + rng.next() % 6 : 1;
    for (size_t k = 0; k < repeat; ++k)
      s += pick;
  }
  return s;
}

// Random runs of letters of every case class, marks, apostrophes and contraction letters: the
// overlapping classes of o200k's letter alternatives, where backtracking decides the split.
std::string randomLetters(uint64_t seed, size_t chars) {
  static const std::vector<std::string> palette = [] {
    std::vector<std::string> p;
    for (const char* a : {"a", "s", "t", "l", "d", "e", "A", "S", "T", "L", "D", "'", "'", " "}) {
      p.push_back(a);
    }
    // Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, and letters that fold to ASCII ones.
    for (char32_t c : {U'Ж',      U'ж',      U'É',      U'é', U'ǅ', U'ǈ',      U'ʰ',
                       U'ˢ',      U'ー',     U'中',     U'ก', U'א', U'\u0301', U'\u0903',
                       U'\u20dd', U'\u0e31', U'\u093f', U'ſ', U'K', U'\u2160', U'9'}) {
      p.push_back(utf8(c));
    }
    return p;
  }();
  Lcg rng{seed};
  std::string s;
  for (size_t i = 0; i < chars; ++i)
    s += palette[rng.next() % palette.size()];
  return s;
}

std::string invalidUtf8() {
  std::string s = "valid start ";
  for (const char* bad : {"\xff",
                          "\xfe\xfe",
                          "\xc0\x80",
                          "\xc1\xbf",
                          "\xe0\x80\x80",
                          "\xe0\x9f\xbf",
                          "\xed\xa0\x80",
                          "\xed\xbf\xbf",
                          "\xf0\x80\x80\x80",
                          "\xf4\x90\x80\x80",
                          "\xf5\x80\x80\x80",
                          "\xe4\xb8",
                          "\xe4",
                          "\xf0\x9f\x98",
                          "\x80",
                          "\x80\x80\xbf",
                          "\xc3",
                          "\xc3\xc3\xa9",
                          "\xe2\x82\xe2\x82\xac",
                          "\xf8\x88\x80\x80\x80",
                          "\xfc\x84\x80\x80\x80\x80"}) {
    s += "word";
    s += bad;
    s += "next ";
    s += bad;
    s += " 12";
    s += bad;
    s += "34\n";
  }
  s += "ends in a truncated sequence \xf0\x9f\x98";
  return s;
}

class TokensParity : public ::testing::Test {
 protected:
  static fs::path workDir(const std::string& name) {
    fs::path dir = fs::path(PARLEY_PARITY_WORK_DIR) / name;
    fs::remove_all(dir / "corpus");
    fs::remove_all(dir / "out");
    fs::create_directories(dir / "corpus");
    return dir;
  }

  // Runs the reference on `files`; results land in dir/out.
  static void runReference(const fs::path& dir, const std::vector<fs::path>& files,
                           const std::string& encodings = "cl100k_base,o200k_base") {
    std::string cmd = "NODE_PATH='" + std::string(PARLEY_NODE_DIR) + "/node_modules' node '" +
                      std::string(PARLEY_NODE_SCRIPT) + "' --encodings=" + encodings + " '" +
                      (dir / "out").string() + "'";
    for (const auto& f : files)
      cmd += " '" + f.string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "the reference (npm tiktoken) failed: " << cmd;
  }

  static void expectSameIds(const fs::path& dir, const fs::path& file) {
    const std::string text = readFile(file);
    const bool special = file.string().ends_with(".special.txt");
    for (const std::string& name : kEncodings) {
      auto encoding = parley::loadEncoding(name);
      parley::EncodeOptions options;
      options.allowAllSpecial = special;
      std::vector<TokenId> ours = encoding->encode(text, options);
      std::vector<TokenId> theirs =
          readIds(dir / "out" / (file.filename().string() + "." + name + ".ids"));
      if (ours == theirs) {
        EXPECT_EQ(encoding->count(text, options), ours.size());
        continue;
      }
      size_t at = 0;
      while (at < ours.size() && at < theirs.size() && ours[at] == theirs[at])
        ++at;
      std::string context;
      for (size_t k = at >= 5 ? at - 5 : 0; k < std::min(at + 5, theirs.size()); ++k) {
        auto b = encoding->tokenBytes(theirs[k]);
        context += "[" + std::to_string(theirs[k]) + ":" + std::string(b ? *b : "?") + "]";
      }
      ADD_FAILURE() << name << " differs on " << file.filename() << " at token " << at << " of "
                    << theirs.size() << " (ours " << ours.size()
                    << "); tiktoken around it: " << context << " ours: "
                    << (at < ours.size() ? std::to_string(ours[at]) : std::string("end"));
    }
  }
};

TEST_F(TokensParity, CorpusIdsMatchTiktoken) {
  fs::path dir = workDir("corpus");
  std::vector<fs::path> files;
  auto add = [&](const std::string& name, const std::string& text) {
    files.push_back(dir / "corpus" / name);
    writeFile(files.back(), text);
  };
  // Prose: the licenses every Debian system carries.
  std::vector<fs::path> licenses;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses")) {
    if (e.is_regular_file()) licenses.push_back(e.path());
  }
  std::sort(licenses.begin(), licenses.end());
  ASSERT_GE(licenses.size(), 5u);
  for (const auto& p : licenses)
    add("license-" + p.filename().string(), readFile(p));
  // Source code: the first ~1.5 MB of the C++ standard library's headers.
  std::vector<fs::path> headers;
  for (const auto& e : fs::recursive_directory_iterator("/usr/include/c++")) {
    if (e.is_regular_file()) headers.push_back(e.path());
  }
  std::sort(headers.begin(), headers.end());
  size_t codeBytes = 0;
  for (size_t i = 0; i < headers.size() && codeBytes < 1'500'000; ++i) {
    std::string text = readFile(headers[i]);
    codeBytes += text.size();
    add("code-" + std::to_string(i) + ".txt", text);
  }
  ASSERT_GE(codeBytes, 1'000'000u);
  add("handwritten.txt", kHandwritten);
  add("code-snippets.txt", kCode);
  add("adversarial-runs.txt", adversarialRuns());
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    add("random-" + std::to_string(seed) + ".txt", randomText(seed, 20000));
  }
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    add("random-letters-" + std::to_string(seed) + ".txt", randomLetters(seed, 20000));
  }
  add("invalid-utf8.txt", invalidUtf8());
  add("specials-as-text.txt",
      "a <|endoftext|> b <|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|> <|im_start|>");
  add("specials.special.txt",
      "a <|endoftext|> b <|fim_prefix|>x<|fim_middle|>y<|fim_suffix|>z<|endofprompt|><|endoftext|"
      "<|endoftext|><|endoftext|> <|im_start|>user");
  add("empty.txt", "");
  runReference(dir, files);
  for (const auto& f : files)
    expectSameIds(dir, f);
}

TEST_F(TokensParity, SpecialTokensAndPatternsAreThePackages) {
  fs::path dir = workDir("specs");
  runReference(dir, {});
  auto specs = nlohmann::json::parse(readFile(dir / "out" / "specs.json"));
  for (const std::string& name : kEncodings) {
    const parley::EncodingSpec* spec = parley::findEncodingSpec(name);
    ASSERT_NE(spec, nullptr);
    EXPECT_EQ(spec->patStr, specs[name]["pat_str"].get<std::string>()) << name;
    nlohmann::json ours = nlohmann::json::object();
    for (const auto& [text, id] : spec->specialTokens)
      ours[text] = id;
    EXPECT_EQ(ours, specs[name]["special_tokens"]) << name;
  }
}

// A 20 000-character word: one piece the split pattern cannot break, far past the length where
// the merge switches to its heap (mergeLarge). tiktoken is quadratic on it (~1 s per encoding
// here, ~25 s at 100 000 characters for no more coverage), so each encoding is its own test and
// the reference's result is cached by content.
class LongWordParity : public TokensParity, public ::testing::WithParamInterface<std::string> {};

TEST_P(LongWordParity, TwentyThousandCharacterWordMatches) {
  fs::path dir = workDir("long-word-" + GetParam());
  Lcg rng{42};
  std::string word;
  for (int i = 0; i < 20000; ++i)
    word += static_cast<char>('a' + rng.next() % 26);
  fs::path file = dir / "corpus" / "long-word.txt";
  writeFile(file, word);
  runReference(dir, {file}, GetParam());
  auto encoding = parley::loadEncoding(GetParam());
  std::vector<TokenId> theirs = readIds(dir / "out" / ("long-word.txt." + GetParam() + ".ids"));
  EXPECT_EQ(encoding->encode(word), theirs);
}

INSTANTIATE_TEST_SUITE_P(Encodings, LongWordParity, ::testing::Values("cl100k_base", "o200k_base"));

}  // namespace
