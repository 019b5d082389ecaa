// parseJson: the depth limit every JSON from outside goes through; canonicalJson: RFC 8785.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>

#include "parley/canonical_json.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"

namespace parley {
namespace {

using nlohmann::json;

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<std::size_t>(depth), '[') + inner +
         std::string(static_cast<std::size_t>(depth), ']');
}

std::string errorOf(std::string_view text, JsonLimits limits = {}) {
  try {
    parseJson(text, limits);
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "";
}

TEST(ParseJson, DepthUpToTheLimitParses) {
  json value = parseJson(nested(kDefaultMaxJsonDepth));
  for (int i = 0; i < kDefaultMaxJsonDepth; ++i) {
    ASSERT_TRUE(value.is_array());
    value = json(value[0]);
  }
  EXPECT_EQ(value, 1);
  EXPECT_EQ(parseJson(R"({"a": {"b": [1, {"c": null}]}})", JsonLimits{4})["a"]["b"][1]["c"],
            nullptr);
}

TEST(ParseJson, DeeperThanTheLimitIsAProtocolErrorNamingTheByte) {
  EXPECT_EQ(errorOf(nested(kDefaultMaxJsonDepth + 1)),
            "JSON nested deeper than 128 levels (at byte 128)");
  EXPECT_EQ(errorOf(R"({"a": {"b": [1]}})", JsonLimits{2}),
            "JSON nested deeper than 2 levels (at byte 12)");
}

TEST(ParseJson, AHundredThousandLevelsFailCleanly) {
  // Without the check this parses, and the first copy of the value overflows the stack.
  const std::string deep = nested(100'000);
  EXPECT_NE(errorOf(deep).find("nested deeper than 128 levels"), std::string::npos);
  EXPECT_TRUE(parseJson(deep, {}, /*allowExceptions=*/false).is_discarded());
  const std::string objects = [] {
    std::string text;
    for (int i = 0; i < 100'000; ++i)
      text += R"({"x":)";
    return text + "1" + std::string(100'000, '}');
  }();
  EXPECT_NE(errorOf(objects).find("nested deeper"), std::string::npos);
}

TEST(ParseJson, BracketsInsideStringsDoNotCount) {
  const std::string text = R"({"a": "[[[[{{{{\"[[[[", "b": ["]]]]"]})";
  json value = parseJson(text, JsonLimits{2});
  EXPECT_EQ(value["a"], "[[[[{{{{\"[[[[");
  EXPECT_EQ(value["b"][0], "]]]]");
  EXPECT_EQ(findJsonTooDeep(R"(["\\", [[1]]])", 2), 8u);  // an escaped backslash ends no string
}

TEST(ParseJson, SyntaxErrorsAreProtocolErrorsWithoutNlohmannsPrefix) {
  const std::string error = errorOf("{\"a\": tru}");
  EXPECT_EQ(error.rfind("not valid JSON: ", 0), 0u) << error;
  EXPECT_EQ(error.find("[json.exception"), std::string::npos) << error;
  EXPECT_TRUE(parseJson("{", {}, /*allowExceptions=*/false).is_discarded());
  EXPECT_FALSE(errorOf("[1] 2").empty());  // one document only
}

// RFC 8785, section 3.2.2: whitespace, literals, numbers and string escapes.
TEST(CanonicalJson, TheRfcsSerializationExample) {
  const json value = parseJson(R"({
    "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
    "literals": [null, true, false]
  })");
  EXPECT_EQ(canonicalJson(value),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
            "\"string\":\"\u20ac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
}

// RFC 8785, section 3.2.3: members sorted by UTF-16 code units (the emoji, a surrogate pair,
// comes before U+FB33 though its code point is larger).
TEST(CanonicalJson, SortsMemberNamesByUtf16CodeUnits) {
  const json value = parseJson(R"({
    "\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis"})");
  EXPECT_EQ(canonicalJson(value),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin "
            "Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: "
            "Grinning Face\",\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"}");
}

// RFC 8785, Appendix B: each IEEE 754 double as ECMAScript writes it.
TEST(CanonicalJson, WritesNumbersAsEcmaScriptDoes) {
  const std::pair<std::uint64_t, const char*> cases[] = {
      {0x0000000000000000, "0"},
      {0x8000000000000000, "0"},
      {0x0000000000000001, "5e-324"},
      {0x8000000000000001, "-5e-324"},
      {0x7fefffffffffffff, "1.7976931348623157e+308"},
      {0xffefffffffffffff, "-1.7976931348623157e+308"},
      {0x4340000000000000, "9007199254740992"},
      {0xc340000000000000, "-9007199254740992"},
      {0x4430000000000000, "295147905179352830000"},
      {0x44b52d02c7e14af5, "9.999999999999997e+22"},
      {0x44b52d02c7e14af6, "1e+23"},
      {0x44b52d02c7e14af7, "1.0000000000000001e+23"},
      {0x444b1ae4d6e2ef4e, "999999999999999700000"},
      {0x444b1ae4d6e2ef4f, "999999999999999900000"},
      {0x444b1ae4d6e2ef50, "1e+21"},
      {0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
      {0x3eb0c6f7a0b5ed8d, "0.000001"},
      {0x41b3de4355555553, "333333333.3333332"},
      {0x41b3de4355555554, "333333333.33333325"},
      {0x41b3de4355555555, "333333333.3333333"},
      {0x41b3de4355555556, "333333333.3333334"},
      {0x41b3de4355555557, "333333333.33333343"},
      {0xbecbf647612f3696, "-0.0000033333333333333333"},
      {0x43143ff3c1cb0959, "1424953923781206.2"},
  };
  for (const auto& [bits, text] : cases)
    EXPECT_EQ(canonicalJson(json(std::bit_cast<double>(bits))), text) << std::hex << bits;
  EXPECT_EQ(canonicalJson(json(42)), "42");
  EXPECT_EQ(canonicalJson(json(-7)), "-7");
  EXPECT_EQ(canonicalJson(json(std::uint64_t{18446744073709551615u})), "18446744073709552000");
}

TEST(CanonicalJson, RefusesWhatIsNotIJson) {
  EXPECT_THROW(canonicalJson(json(std::bit_cast<double>(std::uint64_t{0x7fffffffffffffff}))),
               ValidationError);  // NaN
  EXPECT_THROW(canonicalJson(json(std::bit_cast<double>(std::uint64_t{0x7ff0000000000000}))),
               ValidationError);  // Infinity
  EXPECT_THROW(canonicalJson(json("\xff")), ValidationError);
  EXPECT_THROW(canonicalJson(json({{"\xed\xa0\x80", 1}})), ValidationError);  // a surrogate
  EXPECT_EQ(canonicalJson(json::parse(R"({"b":[],"a":{"d":1,"c":"\u001f"}})")),
            R"({"a":{"c":"\u001f","d":1},"b":[]})");
}

}  // namespace
}  // namespace parley
