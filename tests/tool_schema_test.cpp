// Hostile schemas and values against CompiledSchema (src/tools/tool_schema.hpp): every schema a
// tools file, an MCP server or --schema can send is refused with a clear error or checked in
// bounded time and stack, never a crash or a stall.
#include "tools/tool_schema.hpp"

#include <gtest/gtest.h>

#include <stop_token>
#include <string>

#include "parley/errors.hpp"

namespace parley {
namespace {

using nlohmann::json;

std::string compileError(const json& schema) {
  try {
    CompiledSchema compiled(schema);
  } catch (const ValidationError& e) {
    return e.what();
  }
  return "";
}

TEST(ToolSchema, SelfReferenceInPlaceIsRefusedWithItsPath) {
  const std::string error = compileError(json::parse(R"({"allOf":[{"$ref":"#"}]})"));
  EXPECT_NE(error.find("$ref cycle"), std::string::npos) << error;
  EXPECT_NE(error.find("schema.allOf[0].$ref"), std::string::npos) << error;
}

TEST(ToolSchema, MutuallyReferringDefinitionsAreRefused) {
  const std::string error = compileError(json::parse(R"({
    "type":"object","properties":{"x":{"$ref":"#/definitions/a"}},
    "definitions":{"a":{"anyOf":[{"$ref":"#/definitions/b"}]},
                   "b":{"not":{"$ref":"#/definitions/a"}}}})"));
  EXPECT_NE(error.find("$ref cycle"), std::string::npos) << error;
  EXPECT_NE(error.find("schema.definitions."), std::string::npos) << error;
}

TEST(ToolSchema, RecursionThroughAPropertyIsAllowedAndTheValueDepthCapped) {
  const CompiledSchema tree(json::parse(
      R"({"type":"object","properties":{"child":{"$ref":"#"},"n":{"type":"integer"}}})"));
  EXPECT_EQ(tree.check(json::parse(R"({"child":{"child":{"n":1}}})")), "");
  EXPECT_NE(tree.check(json::parse(R"({"child":{"child":{"n":"x"}}})")), "");
  json deep = json::object();
  for (int i = 0; i < 100'000; ++i)
    deep = json{{"child", std::move(deep)}};
  const std::string report = tree.check(deep);
  EXPECT_NE(report.find("nested deeper than"), std::string::npos) << report;
}

TEST(ToolSchema, LongPatternIsRefusedAndOneUnderTheCapWorks) {
  const std::string error =
      compileError(json{{"type", "string"}, {"pattern", std::string(60'000, 'a')}});
  EXPECT_NE(error.find("longer than"), std::string::npos) << error;
  EXPECT_NE(error.find("schema.pattern"), std::string::npos) << error;
  const CompiledSchema near(json{{"type", "string"}, {"pattern", std::string(4'000, 'a')}});
  EXPECT_EQ(near.check(std::string(4'000, 'a')), "");
  EXPECT_NE(near.check(std::string(3'999, 'a')), "");
}

TEST(ToolSchema, BacktrackingPatternFinishes) {
  const CompiledSchema compiled(json::parse(R"({"type":"string","pattern":"^(a+)+$"})"));
  // std::regex doubles its time per 'a' here (28: 10-18 s; 40: hours); RE2 is linear.
  const std::string report = compiled.check(std::string(40, 'a') + "!");
  EXPECT_NE(report.find("failed to match regex"), std::string::npos) << report;
  EXPECT_EQ(compiled.check(std::string(40, 'a')), "");
}

TEST(ToolSchema, BacktrackingPatternPropertyFinishes) {
  const CompiledSchema compiled(json::parse(
      R"({"type":"object","patternProperties":{"^(a+)+$":{"type":"integer"}},
          "additionalProperties":false})"));
  EXPECT_NE(compiled.check(json{{std::string(40, 'a') + "!", 1}}), "");
  EXPECT_EQ(compiled.check(json{{std::string(40, 'a'), 1}}), "");
  EXPECT_NE(compiled.check(json{{std::string(40, 'a'), "x"}}), "");
}

TEST(ToolSchema, PatternsRe2CannotRunAreRefusedAndUnicodeEscapesWork) {
  const std::string error = compileError(json::parse(R"({"type":"string","pattern":"(?=a)a"})"));
  EXPECT_NE(error.find("RE2"), std::string::npos) << error;
  const CompiledSchema escaped(json::parse(R"({"type":"string","pattern":"^\\u0041+$"})"));
  EXPECT_EQ(escaped.check("AAA"), "");
  EXPECT_NE(escaped.check("aaa"), "");
}

TEST(ToolSchema, LongStringsAreNotMatched) {
  const CompiledSchema compiled(json::parse(R"({"type":"string","pattern":"a"})"));
  const std::string report = compiled.check(std::string(kMaxMatchedLength + 1, 'a'));
  EXPECT_NE(report.find("cannot be matched"), std::string::npos) << report;
}

TEST(ToolSchema, FormatsRunWithoutRecursionOverTheString) {
  const CompiledSchema date(json::parse(R"({"type":"string","format":"date-time"})"));
  EXPECT_EQ(date.check("2024-02-29T10:00:00Z"), "");
  EXPECT_NE(date.check("2024-02-30T10:00:00Z"), "");
  EXPECT_EQ(date.check(std::string(500'000, '1') + "-01-01T00:00:00Z"), "");  // a long year
  EXPECT_NE(date.check(std::string(500'000, '1') + "-13-01T00:00:00Z"), "");
  const CompiledSchema time(json::parse(R"({"type":"string","format":"time"})"));
  EXPECT_EQ(time.check("16:52:45+02:00"), "");
  EXPECT_NE(time.check("16:52:45." + std::string(500'000, '0') + "x"), "");
}

TEST(ToolSchema, DeepAndLargeSchemasAndLongReferencesAreRefused) {
  json deep = json{{"type", "string"}};
  for (int i = 0; i < 100; ++i)
    deep = json{{"type", "array"}, {"items", std::move(deep)}};
  EXPECT_NE(compileError(deep).find("nested deeper than"), std::string::npos);

  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 30'000; ++i)
    wide["properties"]["p" + std::to_string(i)] = json::object();
  EXPECT_NE(compileError(wide).find("more than"), std::string::npos);

  const json longRef = {{"$ref", "#/" + std::string(60'000, 'a')}};
  EXPECT_NE(compileError(longRef).find("longer than"), std::string::npos);
}

// A chain of references, each applied in place: compiled and checked to its end under the cap,
// refused past it (valijson compiles a chain recursively: 5 000 overflowed the stack).
json refChain(int length) {
  json schema = {{"$ref", "#/definitions/d0"}};
  for (int i = 0; i < length; ++i)
    schema["definitions"]["d" + std::to_string(i)] = {
        {"allOf", {{{"$ref", "#/definitions/d" + std::to_string(i + 1)}}}}};
  schema["definitions"]["d" + std::to_string(length)] = {{"type", "string"}};
  return schema;
}

TEST(ToolSchema, LongReferenceChainsAreCappedAndCheckedWithoutCrashing) {
  const CompiledSchema chain(refChain(static_cast<int>(kMaxSchemaRefs) - 1));
  EXPECT_NE(chain.check(json(5)), "");  // nests ~1 000 sub-schemas: checked or cut, no crash
  const std::string error = compileError(refChain(5'000));
  EXPECT_NE(error.find("$refs"), std::string::npos) << error;
}

TEST(ToolSchema, ACheckIsBoundedInSteps) {
  json branches = json::array();
  for (int i = 0; i < 600; ++i)
    branches.push_back({{"type", "string"}, {"minLength", i}});
  const CompiledSchema compiled(json{{"type", "array"}, {"items", {{"anyOf", branches}}}});
  const std::string report = compiled.check(json(std::vector<int>(200, 1)));
  EXPECT_NE(report.find("steps"), std::string::npos) << report;
}

TEST(ToolSchema, ACheckStopsWhenCancelledOrPastItsDeadline) {
  json branches = json::array();
  for (int i = 0; i < 100; ++i)
    branches.push_back({{"type", "string"}});
  const CompiledSchema compiled(json{{"type", "array"}, {"items", {{"anyOf", branches}}}});
  const json value(std::vector<int>(100, 1));
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(compiled.check(value, {stop.get_token(), std::nullopt}), CancelledError);
  EXPECT_THROW(compiled.check(value, {{}, std::chrono::steady_clock::now()}), TimeoutError);
  EXPECT_NE(compiled.check(value), "");
}

}  // namespace
}  // namespace parley
