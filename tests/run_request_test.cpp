// readRunRequest: the one reader of a run request (POST /v1/threads/{id}/runs and
// `parley submit`); each refusal names the body's key.
#include "parley/run_request.hpp"

#include <gtest/gtest.h>

#include "parley/errors.hpp"

namespace parley {
namespace {

using json = nlohmann::json;

std::string refusedField(const json& body) {
  try {
    readRunRequest(body);
  } catch (const ValidationError& e) {
    return e.field();
  }
  return "(accepted)";
}

TEST(RunRequest, AStringIsOneUserMessageAndStreamIsOnByDefault) {
  const RunRequest request = readRunRequest({{"input", "Hi"}});
  ASSERT_EQ(request.input.size(), 1u);
  EXPECT_EQ(request.input[0].role, Role::User);
  EXPECT_EQ(request.input[0].content, "Hi");
  EXPECT_TRUE(request.options.stream);
  EXPECT_EQ(request.options.policy, DoubleTextPolicy::Enqueue);
  EXPECT_FALSE(request.options.systemPrompt.has_value());
  EXPECT_FALSE(request.options.tools.has_value());
}

TEST(RunRequest, EveryFieldIsRead) {
  const RunRequest request = readRunRequest(
      {{"input",
        json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}})},
       {"id", "r-1"},
       {"profile", "fast"},
       {"system", "Be brief."},
       {"policy", "rollback"},
       {"stream", false},
       {"max_iterations", 3},
       {"tools", {"clock"}},
       {"metadata", {{"k", "v"}}}});
  EXPECT_EQ(request.input.size(), 2u);
  EXPECT_EQ(request.options.id, "r-1");
  EXPECT_EQ(request.options.profile, "fast");
  EXPECT_EQ(request.options.systemPrompt, "Be brief.");
  EXPECT_EQ(request.options.policy, DoubleTextPolicy::Rollback);
  EXPECT_FALSE(request.options.stream);
  EXPECT_EQ(request.options.maxIterations, 3);
  EXPECT_EQ(request.options.tools, std::vector<std::string>{"clock"});
  EXPECT_EQ(request.options.metadata["k"], "v");
}

TEST(RunRequest, EachRefusalNamesItsKey) {
  EXPECT_EQ(refusedField(json::object()), "input");
  EXPECT_EQ(refusedField({{"input", ""}}), "input");
  EXPECT_EQ(refusedField({{"input", json::array()}}), "input");
  EXPECT_EQ(refusedField({{"input", {{{"role", "user"}}}}}), "input");
  EXPECT_EQ(refusedField({{"input", "x"}, {"policy", "sometimes"}}), "policy");
  EXPECT_EQ(refusedField({{"input", "x"}, {"stream", "yes"}}), "stream");
  EXPECT_EQ(refusedField({{"input", "x"}, {"profile", 3}}), "profile");
  EXPECT_EQ(refusedField({{"input", "x"}, {"tools", "clock"}}), "tools");
  EXPECT_EQ(refusedField({{"input", "x"}, {"tools", {1}}}), "tools");
  // 2^32 + 1 used to wrap to 1; 0, negatives and text are no count either.
  for (const json& count : {json(4294967297ULL), json(0), json(-1), json("3")})
    EXPECT_EQ(refusedField({{"input", "x"}, {"max_iterations", count}}), "max_iterations");
  EXPECT_EQ(refusedField(json::array()), "body");
}

}  // namespace
}  // namespace parley
