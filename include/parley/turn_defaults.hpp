// The host kit: how every host of the tool loop (the executor, the durable worker and the
// service on it, the command line, the facade) configures a turn, in one place.
//
// TurnDefaults holds the settings of a turn that are not the model's: timeouts, the iteration
// and tool caps, the token limit, the system prompt and the cost budget. Each host embeds one
// (ExecutorOptions::turn, WorkerOptions::turn, ...) instead of declaring the fields again, and
// each turns a profile into a configured conversation with configureConversation() and a turn's
// RunOptions with turnRunOptions(), so a setting added here reaches every host, and every host
// honours every setting (docs/architecture.md, "Hosts").
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "parley/conversation_manager.hpp"
#include "parley/cost.hpp"
#include "parley/openai_client.hpp"
#include "parley/tools.hpp"

namespace parley {

struct TurnDefaults {
  // Each model call, its retries included; 0: only the profile's own timeouts (connect,
  // request, idle), which allow a non-streamed request 10 minutes per attempt.
  std::chrono::milliseconds callTimeout{0};
  // The whole turn: every model call with its retries and every tool call. When it passes,
  // what is under way is cancelled and the turn fails with a TimeoutError. 0: no such bound.
  std::chrono::milliseconds turnTimeout{0};
  int maxIterations = 10;         // model calls in one turn, 1 to kMaxIterations
  int maxToolCallsPerReply = 64;  // calls of one reply that run; the rest get an error result
  int maxToolConcurrency = 4;     // calls of one reply running at once, 1 to kMaxConcurrency
  int64_t tokenLimit = 0;         // the context's size that triggers compression; 0: none
  std::string systemPrompt{};     // non-empty: the first message of a new thread
  // Cost limits, checked before every model call (cost.hpp). `budget.model` may stay empty:
  // configureConversation() prices the profile's model. Default: no limits.
  CostBudget budget{};

  static constexpr int kMaxIterations = 10'000;
  static constexpr int kMaxToolCallsPerReply = 100'000;
  static constexpr int kMaxConcurrency = 1'024;
  // Timeouts past this (about 24 days) are refused: they overflow a steady_clock deadline on
  // some platforms and mean "never" anyway (use 0).
  static constexpr std::chrono::milliseconds kMaxTimeout{2'000'000'000};
};

// Throws ValidationError naming the field as `where` + "." + field (e.g.
// "options.turn.maxIterations") for a value out of range.
void validateTurnDefaults(const TurnDefaults& turn, const std::string& where);

// A conversation of `profile` made ready for a turn: `llm` (the profile's client, possibly
// wrapped by the host, e.g. in a response cache), `tools` (null or empty: none offered), the
// turn's caps, token limit, system prompt and budget, and the profile's prompt counting
// (token_counting = "remote": a remote counter for the token limit and the budget). Validates
// `turn` ("turn.<field>").
ConversationOptions configureConversation(const ClientOptions& profile,
                                          std::shared_ptr<LlmClient> llm,
                                          std::shared_ptr<ToolRegistry> tools,
                                          const TurnDefaults& turn);

// The RunOptions of one turn under `turn`: its call timeout and turn timeout. The host adds its
// callbacks and runners.
RunOptions turnRunOptions(const TurnDefaults& turn);

// Whether a person's answer to an approval question (a tool that requiresApproval) approves the
// call: true, {"approved": true}, or the text yes, y, approve, approved, ok or true (any case,
// blanks around ignored). Anything else denies it. Every host asks this one function.
bool isApproval(const nlohmann::json& answer);

}  // namespace parley
