// What a request of the executor asks for, read and checked once when it arrives: its node kind
// (the handler that serves it), and every field that handler will read, so that a bad request
// fails before anything runs with a ValidationError naming the field (docs/executor.md,
// "Requests"). Internal to src/executor/.
//
// Thread-safety: free functions over values; the options are read only.
#pragma once

#include <optional>
#include <string>

#include "parley/executor.hpp"
#include "parley/structured_output.hpp"

namespace parley::detail {

// The node kinds of docs/executor.md; a structured node is an llm node whose parameters hold
// kStructuredKey.
enum class NodeKind { Llm, Structured, ContextProcessor, UserInteraction, Tool };

// The key of requestData.parameters that makes an llm node ask for a structured answer.
inline constexpr const char* kStructuredKey = "structured";

// Checks `request` against the executor's options and returns its kind.
NodeKind validateRequest(const LlmExecutionRequest& request, const ExecutorOptions& options);

// Why a call of `name` may not run for a request with `data`, or nullopt: a tool not offered,
// or one the executor's own worker cannot run (its registry lacks it), would otherwise wait
// out its timeout. With toolWorker off, the caller's worker decides about unlisted tools.
std::optional<std::string> toolRefusal(const LlmRequestData& data, const std::string& name,
                                       const ExecutorOptions& options);

// A structured node's schema and options (requestData.parameters.structured).
struct StructuredSpec {
  nlohmann::json schema;
  StructuredOptions options;
};
// Reads and checks requestData.parameters.structured; a ValidationError names the field under
// it.
StructuredSpec parseStructured(const nlohmann::json& value);

// `text` cut to at most `maxBytes`, not inside a UTF-8 character.
std::string cutText(const std::string& text, size_t maxBytes);

}  // namespace parley::detail
