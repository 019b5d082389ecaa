#include "parley/turn_defaults.hpp"

#include <cctype>
#include <utility>

#include "parley/errors.hpp"
#include "parley/prompt_counter.hpp"

namespace parley {
namespace {

void checkRange(int64_t value, int64_t low, int64_t high, const std::string& field) {
  if (value < low || value > high) {
    throw ValidationError(field, "is " + std::to_string(value) + "; it must be from " +
                                     std::to_string(low) + " to " + std::to_string(high));
  }
}

void checkTimeout(std::chrono::milliseconds timeout, const std::string& field) {
  checkRange(timeout.count(), 0, TurnDefaults::kMaxTimeout.count(), field);
}

void checkLimit(const std::optional<double>& limit, const std::string& field) {
  if (limit && !(*limit >= 0)) throw ValidationError(field, "must be a number of USD >= 0");
}

}  // namespace

void validateTurnDefaults(const TurnDefaults& turn, const std::string& where) {
  const std::string at = where.empty() ? std::string() : where + ".";
  checkTimeout(turn.callTimeout, at + "callTimeout");
  checkTimeout(turn.turnTimeout, at + "turnTimeout");
  checkRange(turn.maxIterations, 1, TurnDefaults::kMaxIterations, at + "maxIterations");
  checkRange(turn.maxToolCallsPerReply, 1, TurnDefaults::kMaxToolCallsPerReply,
             at + "maxToolCallsPerReply");
  checkRange(turn.maxToolConcurrency, 1, TurnDefaults::kMaxConcurrency, at + "maxToolConcurrency");
  if (turn.tokenLimit < 0) throw ValidationError(at + "tokenLimit", "must not be negative");
  checkLimit(turn.budget.maxCostPerRun, at + "budget.maxCostPerRun");
  checkLimit(turn.budget.maxCostPerThread, at + "budget.maxCostPerThread");
  checkLimit(turn.budget.maxCostShared, at + "budget.maxCostShared");
  if (turn.budget.limited() && !turn.budget.prices) {
    throw ValidationError(at + "budget.prices", "a cost limit needs a price table");
  }
}

ConversationOptions configureConversation(const ClientOptions& profile,
                                          std::shared_ptr<LlmClient> llm,
                                          std::shared_ptr<ToolRegistry> tools,
                                          const TurnDefaults& turn) {
  validateTurnDefaults(turn, "turn");
  ConversationOptions options;
  options.llm = std::move(llm);
  // An empty registry offers nothing; some servers refuse an empty tool list.
  if (tools && tools->size() > 0) options.tools = std::move(tools);
  options.maxToolConcurrency = turn.maxToolConcurrency;
  options.systemPrompt = turn.systemPrompt;
  options.maxIterations = turn.maxIterations;
  options.maxToolCallsPerReply = turn.maxToolCallsPerReply;
  options.tokenLimit = turn.tokenLimit;
  options.budget = turn.budget;
  if (options.budget.model.empty()) options.budget.model = profile.model;
  if (profile.tokenCounting != TokenCounting::Local) {
    options.promptCounter = makePromptCounter(profile);
  }
  return options;
}

bool isApproval(const nlohmann::json& answer) {
  if (answer.is_boolean()) return answer.get<bool>();
  if (answer.is_object()) {
    auto approved = answer.find("approved");
    return approved != answer.end() && approved->is_boolean() && approved->get<bool>();
  }
  if (!answer.is_string()) return false;
  std::string text = answer.get<std::string>();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return false;
  text = text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text == "yes" || text == "y" || text == "approve" || text == "approved" || text == "ok" ||
         text == "true";
}

RunOptions turnRunOptions(const TurnDefaults& turn) {
  RunOptions run;
  if (turn.callTimeout.count() > 0) run.timeout = turn.callTimeout;
  if (turn.turnTimeout.count() > 0) run.turnTimeout = turn.turnTimeout;
  return run;
}

}  // namespace parley
