// parseJson: the depth limit every JSON from outside goes through.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace parley
