// `parley eval DATASET`: runs a dataset of cases (docs/eval.md) against a model, live, through
// cassettes (--replay DIR) or against the mock, prints a table and "N passed, N failed", writes
// JUnit XML and a JSON report, and exits 1 when a case failed. --compare-model / --compare-system
// run the dataset a second time beside the first.
#include <fstream>
#include <iostream>

#include "cli_store.hpp"
#include "commands.hpp"
#include "endpoint.hpp"
#include "parley/eval.hpp"
#include "parley/protocol.hpp"
#include "prices_option.hpp"

namespace parley::cli {

namespace {

struct EvalArgs {
  EndpointArgs endpoint;
  std::string dataset;
  int concurrency = 4;
  int maxIterations = 10;
  int64_t timeoutMs = 0;
  std::string junit;
  std::string report;
  std::string compareModel;
  std::string compareSystem;
  std::string judgeModel;
  std::string pricesFile;
  std::string db;  // where the threads cases fork live
  bool keepForks = false;
};

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw ValidationError(path, "cannot write the file");
}

int runEvalCommand(const EvalArgs& args) {
  const std::vector<eval::EvalCase> cases = eval::loadDataset(args.dataset);
  const ClientOptions endpoint = resolveEndpoint(args.endpoint);
  std::shared_ptr<LlmClient> model = makeClient(endpoint);
  eval::EvalOptions options;
  options.concurrency = args.concurrency;
  options.maxIterations = args.maxIterations;
  if (args.timeoutMs > 0) options.callTimeout = std::chrono::milliseconds(args.timeoutMs);
  options.prices =
      std::make_shared<const PriceTable>(cliPriceTable(args.pricesFile, configFile(args.endpoint)));
  if (!args.db.empty()) options.store = openCliStore(args.db);
  options.keepForks = args.keepForks;
  if (!args.judgeModel.empty()) {
    options.judge = model;
    options.judgeModel = args.judgeModel;
  }
  std::vector<eval::EvalReport> reports;
  const std::string label = endpoint.model;
  reports.push_back(eval::runEval(cases, model, options, label));
  if (!args.compareModel.empty() || !args.compareSystem.empty()) {
    std::vector<eval::EvalCase> second = cases;
    for (eval::EvalCase& c : second) {
      if (!args.compareModel.empty()) c.model = args.compareModel;
      if (!args.compareSystem.empty()) c.system = args.compareSystem;
    }
    std::string other = args.compareModel.empty() ? label : args.compareModel;
    if (!args.compareSystem.empty()) {
      other += " (system B)";
      reports.front().label += " (system A)";
    }
    reports.push_back(eval::runEval(second, model, options, other));
  }
  std::cout << eval::formatTable(reports);
  size_t passed = 0;
  size_t failed = 0;
  for (const eval::EvalReport& r : reports) {
    passed += r.passed;
    failed += r.failed;
  }
  std::cout << passed << " passed, " << failed << " failed\n" << std::flush;
  if (!args.junit.empty()) writeFile(args.junit, eval::toJUnitXml(reports));
  if (!args.report.empty()) {
    nlohmann::json all = nlohmann::json::array();
    for (const eval::EvalReport& r : reports)
      all.push_back(eval::toJson(r));
    writeFile(args.report, (reports.size() == 1 ? all[0] : all).dump(2) + "\n");
  }
  return failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void addEvalCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Run a dataset of cases against a model and score the answers (docs/eval.md)");
  cmd->add_option("dataset", args->dataset, "Cases: JSONL, or TOML [[cases]] (.toml)")->required();
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_option("--concurrency", args->concurrency, "Cases run at once")
      ->check(CLI::Range(1, eval::kMaxConcurrency))
      ->capture_default_str();
  cmd->add_option("--max-iterations", args->maxIterations, "Model calls allowed in one case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeoutMs, "Each model call, in ms (0: the endpoint's)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--junit", args->junit, "Write a JUnit XML report to FILE");
  cmd->add_option("--report", args->report, "Write the JSON report to FILE");
  cmd->add_option("--compare-model", args->compareModel,
                  "Run the dataset again with this model, side by side");
  cmd->add_option("--compare-system", args->compareSystem,
                  "Run the dataset again with this system prompt, side by side");
  cmd->add_option("--judge-model", args->judgeModel,
                  "Grade the cases' `rubric` with this model (on the same endpoint)");
  cmd->add_option("--db", args->db,
                  "Database of the threads cases fork (`thread`): a SQLite file or "
                  "postgresql://...");
  cmd->add_flag("--keep-forks", args->keepForks,
                "Keep the fork each such case ran on (named in the JSON report)");
  addPricesOption(*cmd, args->pricesFile);
  cmd->callback([args, &exitCode] { exitCode = runEvalCommand(*args); });
}

}  // namespace parley::cli
