// Evaluations (docs/eval.md): a dataset of cases (input messages, tools with canned results,
// expected outcomes) run against a model, live, through cassettes (cassette.hpp) or against the
// mock, and scored by deterministic scorers (text equals / contains / regex, the answer's JSON
// Schema, the tool trajectory exact / in order / in any order, tool arguments, maximum cost,
// tokens and latency) and optionally a judge model with a rubric. `parley eval` is this library
// with a table, JUnit XML and a JSON report around it.
//
// Owned by the core layer. Thread-safety: the functions are reentrant; runEval() runs cases on
// up to EvalOptions::concurrency threads, sharing the given clients (which are thread-safe).
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/cost.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/store.hpp"
#include "parley/usage.hpp"

namespace parley::eval {

// Caps on a dataset.
inline constexpr std::size_t kMaxDatasetBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxCases = 100'000;
inline constexpr int kMaxConcurrency = 64;

enum class TrajectoryMatch { Exact, InOrder, AnyOrder };

// A tool the model may call; its result is canned (`result`: a string, or any JSON value sent as
// its text), so a case runs the same every time without running anything real.
struct EvalTool {
  std::string name;
  std::string description;
  nlohmann::json parameters = nlohmann::json::object();
  nlohmann::json result = "";
};

// What a case expects; every expectation set is one scorer.
struct Expectation {
  std::optional<std::string> equals;     // the answer's text, exactly
  std::optional<std::string> contains;   // a substring of the answer
  std::optional<std::string> regex;      // ECMAScript, searched in the answer
  std::optional<nlohmann::json> schema;  // the answer parses as JSON valid under this schema
  std::optional<std::vector<std::string>> tools;  // the names of the calls made
  TrajectoryMatch toolsMatch = TrajectoryMatch::Exact;
  // Tool name -> an object every call of that tool's arguments must contain (keys and values).
  std::optional<nlohmann::json> arguments;
  std::optional<double> maxCost;     // USD, by EvalOptions::prices; unknown price: fails
  std::optional<int64_t> maxTokens;  // total tokens over the run
  std::optional<std::chrono::milliseconds> maxLatency;
  std::optional<std::string> rubric;  // graded by EvalOptions::judge
};

struct EvalCase {
  std::string id;
  std::vector<Message> input;  // the prompt (with earlier turns); may be empty with `thread`
  // A stored thread (EvalOptions::store) the case runs on a fork of, instead of (or before)
  // `input`: the fork shares the thread's first `at` messages (nullopt: all of them; a branch is
  // named by its own thread id), the case's turns go to the fork, the thread is never written.
  std::string thread;
  std::optional<int64_t> at;
  std::string system;  // "" = none (with `thread`: the thread's own)
  std::string model;   // "" = the client's
  std::vector<EvalTool> tools;
  nlohmann::json parameters = nlohmann::json::object();  // ChatRequest::extra
  Expectation expect;
};

struct ScoreResult {
  std::string scorer;  // "equals", "contains", "regex", "schema", "tools", "arguments",
                       // "max_cost", "max_tokens", "max_latency", "judge", "error"
  bool passed = false;
  std::string detail;  // why it failed ("" when it passed)
};

struct CaseResult {
  std::string id;
  bool passed = false;
  std::string answer;
  std::vector<ToolCall> toolCalls;
  TokenUsage usage;
  std::optional<double> cost;
  std::chrono::milliseconds latency{0};
  std::string error;  // the run's failure, "" when it ran
  std::vector<ScoreResult> scores;
  std::string fork;  // the fork the case ran on, when it forked a thread and the fork was kept
};

struct EvalOptions {
  int concurrency = 4;  // cases at once, 1..kMaxConcurrency
  int maxIterations = 10;
  std::optional<std::chrono::milliseconds> callTimeout;
  std::shared_ptr<const PriceTable> prices;  // for max_cost and the reported cost
  std::shared_ptr<LlmClient> judge;          // grades `rubric`; none: a rubric fails
  std::string judgeModel;                    // "" = the judge client's
  // Where the threads cases fork live (EvalCase::thread); none: such a case fails.
  std::shared_ptr<ConversationStore> store;
  bool keepForks = false;  // keep each case's fork (CaseResult::fork) instead of deleting it
};

struct EvalReport {
  std::string label;              // the model or prompt that ran (for --compare)
  std::vector<CaseResult> cases;  // in dataset order
  size_t passed = 0;
  size_t failed = 0;
  std::chrono::milliseconds wall{0};
};

// A case from its JSON form (docs/eval.md); ValidationError naming `where` and the key.
EvalCase caseFromJson(const nlohmann::json& value, const std::string& where);
// JSONL (one case per line; blank lines and lines starting with '#' skipped) or, for a path
// ending in .toml, a TOML document of [[cases]]. Caps: kMaxDatasetBytes, kMaxCases.
std::vector<EvalCase> loadDataset(const std::filesystem::path& path);
std::vector<EvalCase> parseJsonlDataset(std::string_view text, const std::string& source);

// The deterministic scorers of `expect` (and the judge) over one run's result. The judge must
// answer PASS or FAIL on its first line; any other reply fails the scorer saying so.
std::vector<ScoreResult> scoreCase(const EvalCase& evalCase, const CaseResult& result,
                                   const EvalOptions& options);
// Runs and scores one case against `model`. Never throws for a failed run: `error` says.
CaseResult runCase(const EvalCase& evalCase, const std::shared_ptr<LlmClient>& model,
                   const EvalOptions& options);
// Every case, concurrently (bounded). ValidationError for a bad concurrency.
EvalReport runEval(const std::vector<EvalCase>& cases, const std::shared_ptr<LlmClient>& model,
                   const EvalOptions& options, std::string label = {});

// {"label", "passed", "failed", "wall_ms", "cases": [{"id", "passed", "answer", "tool_calls",
//  "usage", "cost", "latency_ms", "error", "scores": [{"scorer", "passed", "detail"}]}]}
nlohmann::json toJson(const EvalReport& report);
// JUnit XML: one <testsuite> per report, one <testcase> per case, a <failure> per failed scorer.
std::string toJUnitXml(const std::vector<EvalReport>& reports);
// A text table: one row per case, a PASS/FAIL column per report, the first failure's detail.
std::string formatTable(const std::vector<EvalReport>& reports);

}  // namespace parley::eval
