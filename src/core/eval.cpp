// Evaluations (parley/eval.hpp, docs/eval.md): datasets, running cases, scorers.
#include "parley/eval.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/stored_thread.hpp"
#include "parley/toml.hpp"
#include "parley/tools.hpp"
#include "tools/tool_schema.hpp"

namespace parley::eval {

namespace {

using nlohmann::json;

const std::vector<std::string> kCaseKeys = {"id",    "input",      "thread", "at",    "system",
                                            "model", "parameters", "tools",  "expect"};
const std::vector<std::string> kExpectKeys = {
    "equals",    "contains", "regex",      "schema",         "tools", "tools_match",
    "arguments", "max_cost", "max_tokens", "max_latency_ms", "rubric"};

void onlyKnownKeys(const json& value, const std::vector<std::string>& known,
                   const std::string& where) {
  for (const auto& [key, _] : value.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw ValidationError(where + "." + key, "unknown key");
    }
  }
}

template <typename T>
T evalField(const json& object, const char* key, const std::string& where) {
  try {
    return object.at(key).get<T>();
  } catch (const json::exception&) {
    throw ValidationError(where + "." + key, "has the wrong type");
  }
}

Expectation expectationFromJson(const json& value, const std::string& where) {
  if (!value.is_object()) throw ValidationError(where, "must be an object");
  onlyKnownKeys(value, kExpectKeys, where);
  Expectation e;
  if (value.contains("equals")) e.equals = evalField<std::string>(value, "equals", where);
  if (value.contains("contains")) e.contains = evalField<std::string>(value, "contains", where);
  if (value.contains("regex")) {
    e.regex = evalField<std::string>(value, "regex", where);
    try {
      std::regex check(*e.regex, std::regex::ECMAScript);
    } catch (const std::regex_error& error) {
      throw ValidationError(where + ".regex",
                            std::string("is no regular expression: ") + error.what());
    }
  }
  if (value.contains("schema")) {
    e.schema = value["schema"];
    CompiledSchema compiled(*e.schema, where + ".schema");  // refuses a bad schema now
  }
  if (value.contains("tools")) e.tools = evalField<std::vector<std::string>>(value, "tools", where);
  if (value.contains("tools_match")) {
    const std::string m = evalField<std::string>(value, "tools_match", where);
    e.toolsMatch = m == "exact"       ? TrajectoryMatch::Exact
                   : m == "in_order"  ? TrajectoryMatch::InOrder
                   : m == "any_order" ? TrajectoryMatch::AnyOrder
                                      : throw ValidationError(where + ".tools_match",
                                                              "exact, in_order or any_order");
  }
  if (value.contains("arguments")) {
    e.arguments = value["arguments"];
    if (!e.arguments->is_object()) {
      throw ValidationError(where + ".arguments", "must map tool names to objects");
    }
  }
  if (value.contains("max_cost")) e.maxCost = evalField<double>(value, "max_cost", where);
  if (value.contains("max_tokens")) e.maxTokens = evalField<int64_t>(value, "max_tokens", where);
  if (value.contains("max_latency_ms")) {
    e.maxLatency = std::chrono::milliseconds(evalField<int64_t>(value, "max_latency_ms", where));
  }
  if (value.contains("rubric")) e.rubric = evalField<std::string>(value, "rubric", where);
  return e;
}

// The text of a reply part by part: what the scorers read.
std::string evalAnswerText(const RunResult& run) {
  return run.content;
}

bool containsAll(const json& actual, const json& wanted) {
  if (wanted.is_object()) {
    if (!actual.is_object()) return false;
    for (const auto& [key, value] : wanted.items()) {
      if (!actual.contains(key) || !containsAll(actual[key], value)) return false;
    }
    return true;
  }
  return actual == wanted;
}

std::string namesText(const std::vector<std::string>& names) {
  std::string text = "[";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? ", " : "") + names[i];
  return text + "]";
}

ScoreResult trajectoryScore(const Expectation& e, const std::vector<ToolCall>& calls) {
  std::vector<std::string> made;
  made.reserve(calls.size());
  for (const ToolCall& call : calls)
    made.push_back(call.name);
  const std::vector<std::string>& wanted = *e.tools;
  bool ok = false;
  switch (e.toolsMatch) {
    case TrajectoryMatch::Exact:
      ok = made == wanted;
      break;
    case TrajectoryMatch::InOrder: {  // wanted is a subsequence of made
      size_t i = 0;
      for (const std::string& name : made) {
        if (i < wanted.size() && name == wanted[i]) ++i;
      }
      ok = i == wanted.size();
      break;
    }
    case TrajectoryMatch::AnyOrder: {  // every wanted call made, in any order
      std::vector<std::string> left = made;
      ok = true;
      for (const std::string& name : wanted) {
        auto it = std::find(left.begin(), left.end(), name);
        if (it == left.end()) {
          ok = false;
          break;
        }
        left.erase(it);
      }
      break;
    }
  }
  return {"tools", ok, ok ? "" : "expected " + namesText(wanted) + ", made " + namesText(made)};
}

// The judge's first line, PASS or FAIL (spaces, case and a closing period aside); nullopt for
// any other reply, which is not taken as either.
std::optional<bool> judgeVerdict(const std::string& reply) {
  std::string line = reply.substr(0, reply.find('\n'));
  const size_t first = line.find_first_not_of(" \t\r*");
  if (first == std::string::npos) return std::nullopt;
  line = line.substr(first);
  line.erase(line.find_last_not_of(" \t\r.*:") + 1);
  std::transform(line.begin(), line.end(), line.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  if (line == "PASS") return true;
  if (line == "FAIL") return false;
  return std::nullopt;
}

// The thread a case forks, as a fork of its own in `store`, deleted when done unless kept.
class CaseFork {
 public:
  CaseFork(const EvalCase& evalCase, const EvalOptions& options) : options_(options) {
    if (!options.store) {
      throw ValidationError("thread", "the case forks thread " + evalCase.thread +
                                          ": it needs a store (EvalOptions::store, --db)");
    }
    if (!evalCase.system.empty()) {
      throw ValidationError("system", "the case forks thread " + evalCase.thread +
                                          ", which keeps its own system prompt");
    }
    const auto info = options.store->threadInfo(evalCase.thread);
    if (!info) throw ValidationError("thread", "no thread " + evalCase.thread + " to fork");
    const int64_t position = evalCase.at.value_or(info->messageCount);
    if (position > info->messageCount) {
      throw ValidationError("at", "thread " + evalCase.thread + " holds " +
                                      std::to_string(info->messageCount) + " messages, not " +
                                      std::to_string(position));
    }
    ThreadOptions fork;
    fork.metadata = {{"eval_case", evalCase.id}};
    id_ = options.store->forkThread(evalCase.thread, position, fork).id;
  }
  ~CaseFork() {
    if (options_.keepForks) return;
    try {
      options_.store->deleteThread(id_);
    } catch (const std::exception&) {
      // The case's result stands; a fork left behind is only clutter.
    }
  }
  CaseFork(const CaseFork&) = delete;
  CaseFork& operator=(const CaseFork&) = delete;
  const std::string& id() const { return id_; }

 private:
  const EvalOptions& options_;
  std::string id_;
};

}  // namespace

EvalCase caseFromJson(const json& value, const std::string& where) {
  if (!value.is_object()) throw ValidationError(where, "a case must be an object");
  onlyKnownKeys(value, kCaseKeys, where);
  EvalCase c;
  c.id = value.contains("id") ? evalField<std::string>(value, "id", where) : where;
  const std::string at = where + " (" + c.id + ")";
  if (value.contains("thread")) {
    c.thread = evalField<std::string>(value, "thread", at);
    if (c.thread.empty()) throw ValidationError(at + ".thread", "must name a thread");
  }
  if (value.contains("at")) {
    if (c.thread.empty()) throw ValidationError(at + ".at", "needs a thread to fork");
    c.at = evalField<int64_t>(value, "at", at);
    if (*c.at < 0) throw ValidationError(at + ".at", "must be a message index (0 or more)");
  }
  if (!c.thread.empty() && value.contains("system")) {
    throw ValidationError(at + ".system", "a case that forks a thread has the thread's own");
  }
  if (!value.contains("input") && c.thread.empty()) {
    throw ValidationError(at + ".input", "is required (or a thread to fork)");
  }
  const json& input = value.contains("input") ? value["input"] : json::array();
  if (input.empty() && !c.thread.empty()) {
    // Goes on from the forked history as it is.
  } else if (input.is_string()) {
    c.input.push_back(Message::user(input.get<std::string>()));
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) {
      try {
        c.input.push_back(messageFromJson(input[i]));
      } catch (const ValidationError& e) {
        throw ValidationError(at + ".input[" + std::to_string(i) + "]", e.what());
      }
    }
  } else {
    throw ValidationError(at + ".input", "must be a prompt or a non-empty array of messages");
  }
  if (value.contains("system")) c.system = evalField<std::string>(value, "system", at);
  if (value.contains("model")) c.model = evalField<std::string>(value, "model", at);
  if (value.contains("parameters")) {
    c.parameters = value["parameters"];
    if (!c.parameters.is_object()) throw ValidationError(at + ".parameters", "must be an object");
  }
  if (value.contains("tools")) {
    if (!value["tools"].is_array()) throw ValidationError(at + ".tools", "must be an array");
    for (const json& t : value["tools"]) {
      if (!t.is_object() || !t.contains("name")) {
        throw ValidationError(at + ".tools", "each tool needs a name");
      }
      EvalTool tool;
      tool.name = evalField<std::string>(t, "name", at + ".tools");
      tool.description = t.value("description", "");
      tool.parameters = t.value("parameters", json{{"type", "object"}});
      tool.result = t.value("result", json(""));
      c.tools.push_back(std::move(tool));
    }
  }
  if (value.contains("expect")) c.expect = expectationFromJson(value["expect"], at + ".expect");
  return c;
}

std::vector<EvalCase> parseJsonlDataset(std::string_view text, const std::string& source) {
  if (text.size() > kMaxDatasetBytes) {
    throw ValidationError(source, "over the cap of " + std::to_string(kMaxDatasetBytes) + " bytes");
  }
  std::vector<EvalCase> cases;
  size_t line = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(start, end - start);
    start = end + 1;
    ++line;
    const size_t first = row.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || row[first] == '#') continue;
    if (cases.size() == kMaxCases) {
      throw ValidationError(source, "more than " + std::to_string(kMaxCases) + " cases");
    }
    const std::string where = source + ":" + std::to_string(line);
    json value;
    try {
      value = parseJson(row);
    } catch (const ProtocolError& e) {
      throw ValidationError(where, std::string("not JSON: ") + e.what());
    }
    cases.push_back(caseFromJson(value, where));
  }
  return cases;
}

std::vector<EvalCase> loadDataset(const std::filesystem::path& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw ValidationError("dataset", "cannot read " + path.string() + ": " + ec.message());
  if (size > kMaxDatasetBytes) {
    throw ValidationError("dataset", path.string() + " is over the cap of " +
                                         std::to_string(kMaxDatasetBytes) + " bytes");
  }
  if (path.extension() == ".toml") {
    const json document = readTomlFile(path.string(), kMaxDatasetBytes);
    if (!document.contains("cases") || !document["cases"].is_array()) {
      throw ValidationError(path.string(), "needs [[cases]] tables");
    }
    if (document["cases"].size() > kMaxCases) {
      throw ValidationError(path.string(), "more than " + std::to_string(kMaxCases) + " cases");
    }
    std::vector<EvalCase> cases;
    for (size_t i = 0; i < document["cases"].size(); ++i) {
      cases.push_back(
          caseFromJson(document["cases"][i], path.string() + ": cases[" + std::to_string(i) + "]"));
    }
    return cases;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return parseJsonlDataset(text.str(), path.string());
}

std::vector<ScoreResult> scoreCase(const EvalCase& evalCase, const CaseResult& r,
                                   const EvalOptions& options) {
  const Expectation& e = evalCase.expect;
  std::vector<ScoreResult> scores;
  if (!r.error.empty()) scores.push_back({"error", false, r.error});
  auto add = [&](const char* scorer, bool ok, std::string detail) {
    scores.push_back({scorer, ok, ok ? "" : std::move(detail)});
  };
  if (e.equals) add("equals", r.answer == *e.equals, "answer is \"" + r.answer + "\"");
  if (e.contains) {
    add("contains", r.answer.find(*e.contains) != std::string::npos,
        "\"" + *e.contains + "\" not in the answer");
  }
  if (e.regex) {
    add("regex", std::regex_search(r.answer, std::regex(*e.regex, std::regex::ECMAScript)),
        "/" + *e.regex + "/ does not match the answer");
  }
  if (e.schema) {
    std::string failure;
    try {
      const json answer = parseJson(r.answer);
      failure = CompiledSchema(*e.schema, "expect.schema").check(answer);
    } catch (const ProtocolError& error) {
      failure = std::string("the answer is not JSON: ") + error.what();
    }
    add("schema", failure.empty(), failure);
  }
  if (e.tools) scores.push_back(trajectoryScore(e, r.toolCalls));
  if (e.arguments) {
    std::string failure;
    for (const auto& [name, wanted] : e.arguments->items()) {
      bool called = false;
      for (const ToolCall& call : r.toolCalls) {
        if (call.name != name) continue;
        called = true;
        json args;
        try {
          args = parseJson(call.arguments);
        } catch (const ProtocolError&) {
        }
        if (!containsAll(args, wanted) && failure.empty()) {
          failure = name + " called with " + call.arguments + ", expected " + wanted.dump();
        }
      }
      if (!called && failure.empty()) failure = name + " was not called";
    }
    add("arguments", failure.empty(), failure);
  }
  if (e.maxCost) {
    add("max_cost", r.cost && *r.cost <= *e.maxCost,
        r.cost ? "cost " + std::to_string(*r.cost) + " USD over " + std::to_string(*e.maxCost)
               : std::string("no price for the model (give a price table)"));
  }
  if (e.maxTokens) {
    add("max_tokens", r.usage.totalTokens <= *e.maxTokens,
        std::to_string(r.usage.totalTokens) + " tokens over " + std::to_string(*e.maxTokens));
  }
  if (e.maxLatency) {
    add("max_latency", r.latency <= *e.maxLatency,
        std::to_string(r.latency.count()) + " ms over " + std::to_string(e.maxLatency->count()));
  }
  if (e.rubric) {
    if (!options.judge) {
      add("judge", false, "a rubric needs a judge model (--judge-model)");
    } else {
      ChatRequest request;
      request.model = options.judgeModel;
      request.messages = {
          Message::system("You grade an answer against a rubric. Reply with PASS or FAIL on the "
                          "first line, then one line saying why."),
          Message::user("Rubric:\n" + *e.rubric + "\n\nAnswer:\n" + r.answer)};
      request.temperature = 0;
      try {
        const std::string verdict = options.judge->generate(request).message.content;
        const std::optional<bool> pass = judgeVerdict(verdict);
        if (pass) {
          add("judge", *pass, verdict);
        } else {
          add("judge", false,
              "the judge's reply is not PASS or FAIL on its first line: \"" +
                  verdict.substr(0, 200) + "\"");
        }
      } catch (const std::exception& error) {
        add("judge", false, std::string("the judge failed: ") + error.what());
      }
    }
  }
  return scores;
}

CaseResult runCase(const EvalCase& evalCase, const std::shared_ptr<LlmClient>& model,
                   const EvalOptions& options) {
  CaseResult result;
  result.id = evalCase.id;
  const auto start = std::chrono::steady_clock::now();
  try {
    ConversationOptions o;
    o.llm = model;
    o.systemPrompt = evalCase.system;
    o.maxIterations = options.maxIterations;
    o.request.model = evalCase.model;
    if (!evalCase.parameters.empty()) o.request.extra = evalCase.parameters;
    if (!evalCase.tools.empty()) {
      o.tools = std::make_shared<ToolRegistry>();
      for (const EvalTool& tool : evalCase.tools) {
        const json reply = tool.result;
        o.tools->add(tool.name, tool.description, tool.parameters,
                     // NOLINTNEXTLINE(performance-no-automatic-move): every call gets a copy
                     [reply](const json&, ToolContext&) -> json { return reply; });
      }
    }
    std::optional<CaseFork> fork;
    std::shared_ptr<StoredThread> stored;
    if (!evalCase.thread.empty()) {
      fork.emplace(evalCase, options);
      if (options.keepForks) result.fork = fork->id();
      stored = std::make_shared<StoredThread>(options.store, fork->id());
      o.persist = stored;  // the case's turns go to its fork
    }
    ConversationManager conversation(o);
    if (stored) stored->load(conversation);
    RunOptions run;
    if (options.callTimeout) run.timeout = options.callTimeout;
    const RunResult r = conversation.run(evalCase.input, run);
    result.answer = evalAnswerText(r);
    result.toolCalls = r.toolCalls;
    result.usage = r.usage;
    if (options.prices) {
      const std::string name =
          evalCase.model.empty() ? model->endpoint().defaultModel : evalCase.model;
      result.cost = options.prices->cost(name, r.usage);
    }
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.latency = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  result.scores = scoreCase(evalCase, result, options);
  result.passed = std::all_of(result.scores.begin(), result.scores.end(),
                              [](const ScoreResult& s) { return s.passed; });
  return result;
}

EvalReport runEval(const std::vector<EvalCase>& cases, const std::shared_ptr<LlmClient>& model,
                   const EvalOptions& options, std::string label) {
  if (options.concurrency < 1 || options.concurrency > kMaxConcurrency) {
    throw ValidationError("concurrency", "must be 1.." + std::to_string(kMaxConcurrency));
  }
  if (!model) throw ValidationError("model", "an evaluation needs a model");
  EvalReport report;
  report.label = std::move(label);
  report.cases.resize(cases.size());
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < cases.size(); i = next++) {
      report.cases[i] = runCase(cases[i], model, options);
    }
  };
  const size_t threads = std::min<size_t>(static_cast<size_t>(options.concurrency), cases.size());
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  pool.clear();  // joins
  report.wall = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  for (const CaseResult& c : report.cases)
    (c.passed ? report.passed : report.failed)++;
  return report;
}

}  // namespace parley::eval
