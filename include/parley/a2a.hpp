// A remote Agent2Agent (A2A 1.0) agent offered to the model as a tool (docs/a2a.md, "The client
// side"): its Agent Card is read for its name, description, skills and JSON-RPC interface; a call
// of the tool sends the model's message to the agent and follows the task it makes to its end
// (over its stream when the agent streams, its updates as the call's progress); the answer is
// the task's artifacts as text. A task that needs input
// (TASK_STATE_INPUT_REQUIRED) asks through the call's ToolContext::ask when the caller has one
// (a durable run: the question becomes the run's own, answered from any process), otherwise the
// tool's result says what the agent asks and the model may answer with `task_id`. In a durable
// run the task's id is journaled (ToolContext::checkpoint), so that a worker that takes the run
// over follows the same remote task instead of starting another.
//
// Ownership: addA2aAgent() copies the options into the tool's handler. Thread-safety: the
// handler may run on any number of threads at once; each call makes its own requests.
// Failures: an unreachable agent, a card or answer past a cap, or a failed remote task is the
// tool call's error result (never an exception out of the tool loop); fetchA2aAgentCard() throws
// ConnectionError, TimeoutError, HttpError or ProtocolError naming the URL.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley {

class ToolRegistry;

struct A2aAgentOptions {
  // The agent's base URL (its card at URL/.well-known/agent-card.json) or the card's own URL
  // (ending in .json). http or https.
  std::string url;
  std::string bearerToken;  // sent as Authorization: Bearer (never logged)
  std::vector<std::pair<std::string, std::string>> headers{};
  std::chrono::milliseconds httpTimeout{30'000};   // each request
  std::chrono::milliseconds taskTimeout{600'000};  // one call, the remote task followed to its end
  std::size_t maxCardBytes = 256 << 10;            // the Agent Card
  std::size_t maxResponseBytes = 4 << 20;          // one JSON-RPC answer
  std::size_t maxArtifacts = 32;                   // artifacts of a task read
  std::size_t maxAnswerBytes = 256 << 10;          // the text the model gets (cut past it)
  std::size_t maxSkills = 64;                      // skills kept from the card
  std::size_t maxStreamEventBytes = 1 << 20;       // one event of a task's stream
  std::size_t maxStreamEvents = 10'000;            // events of one stream
  int maxInputRounds = 8;                          // INPUT_REQUIRED answered in one call
};

struct A2aSkill {
  std::string id;
  std::string name;
  std::string description;
};

struct A2aAgentCard {
  std::string name;
  std::string description;
  std::string jsonRpcUrl;  // the card's JSONRPC interface of protocol version 1.0
  bool streaming = false;  // capabilities.streaming: tasks are followed over SSE
  std::vector<A2aSkill> skills;
};

// Reads and checks the card (a JSONRPC 1.0 interface is required).
A2aAgentCard fetchA2aAgentCard(const A2aAgentOptions& options);

// What a task ended in, as far as one call followed it.
struct A2aTaskResult {
  std::string taskId;
  std::string contextId;
  std::string state;   // "TASK_STATE_COMPLETED", ..., "TASK_STATE_INPUT_REQUIRED"
  std::string text;    // the artifacts' text (data parts as JSON), else the status message's
  std::string prompt;  // INPUT_REQUIRED: what the agent asks
};

// How a caller follows a task.
struct A2aFollow {
  std::stop_token stop{};
  // Told the task (its id and context) as soon as the agent has made it, before it ends: where
  // a caller keeps the handle of the remote work (ToolContext::checkpoint).
  std::function<void(const A2aTaskResult& task)> started{};
  // A streamed task's updates as they come: a status message's text ({"task", "state"}) or an
  // artifact's chunk ({"task", "artifact", "append", "last_chunk"}), the text cut at 4 KiB.
  std::function<void(const std::string& text, const nlohmann::json& data)> progress{};
};

// Sends `text` (to task `taskId` when it waits for input, else as a new task on `contextId` when
// given) and follows the task until it ends, needs input or taskTimeout passes. An agent whose
// card says capabilities.streaming gets SendStreamingMessage and the task is followed over its
// stream (then by GetTask if the stream ends early); else SendMessage with `returnImmediately`
// (so that `started` learns the task while it works) and GetTask until it settles.
A2aTaskResult sendA2aMessage(const A2aAgentCard& card, const A2aAgentOptions& options,
                             const std::string& text, const std::string& taskId = "",
                             const std::string& contextId = "", const A2aFollow& follow = {});

// Picks up a task made earlier (by a call that was cut short): reads it (GetTask) and follows it
// (SubscribeToTask when the agent streams, else GetTask) until it ends, needs input or
// taskTimeout passes. ProtocolError when the agent no longer knows it.
A2aTaskResult followA2aTask(const A2aAgentCard& card, const A2aAgentOptions& options,
                            const std::string& taskId, const A2aFollow& follow = {});

// Reads the card and registers the tool `name` ({"message", "task_id"}), described by the card's
// description and skills. Returns the card. A call checkpoints its task as soon as it exists
// (ToolContext::checkpoint: {"agent": name, "task", "context", "round"}, round: the questions
// answered so far) and, run again with that handle (ToolContext::resumeFrom: a durable run taken
// over), follows the same task instead of sending its message again.
A2aAgentCard addA2aAgent(ToolRegistry& registry, const std::string& name,
                         const A2aAgentOptions& options);

}  // namespace parley
