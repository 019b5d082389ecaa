// Structured output: answers that are JSON values checked against a JSON Schema
// (ConversationManager::runStructured and runAs<T>; docs/structured-output.md).
//
// The options, the result, the per-attempt report, the schema caps, the concise schema form
// ("name, age int, bio: a short bio") and the trait that gives a C++ type its schema.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/message.hpp"
#include "parley/usage.hpp"

namespace parley {

// Caps on a schema given to runStructured (it comes from a file, a command line, a caller):
// its compact JSON text and its nesting of arrays and objects. Past them: ValidationError.
inline constexpr std::size_t kMaxStructuredSchemaBytes = std::size_t{256} << 10;
inline constexpr int kMaxStructuredSchemaDepth = 32;
// The most repairs StructuredOptions::maxRepairs may ask for.
inline constexpr int kMaxStructuredRepairs = 10;

// One model call of a structured request, reported as it ends (StructuredOptions::onAttempt).
struct StructuredAttempt {
  StructuredOutputMode rung = StructuredOutputMode::JsonSchema;  // never Auto
  int attempt = 1;                  // 1: the first answer; 2, 3, ...: the repairs
  bool refused = false;             // the server refused the rung (HTTP 400); the next rung follows
  bool valid = false;               // the reply parsed and matched the schema
  std::vector<std::string> errors;  // why it did not: "<path>: <why>"
  std::optional<TokenUsage> usage;  // the call's, as the server reported it
};

struct StructuredOptions {
  // The ladder's first rung; nullopt: the client's (ClientOptions::structuredOutput, the
  // profile's `structured_output`). Auto starts at JsonSchema, or where a refusal left this
  // client, and steps down on a refusal; any other mode is that rung alone.
  std::optional<StructuredOutputMode> mode;
  // Replies that do not parse or validate are answered with their errors and asked again, at
  // most this many times (0..kMaxStructuredRepairs).
  int maxRepairs = 2;
  // json_schema.name and the synthetic tool's name; ^[a-zA-Z0-9_-]{1,64}$.
  std::string name = "answer";
  std::string description;  // the synthetic tool's description; empty: a generic one
  // Stream the calls; nullopt: ConversationOptions::stream, or true when onPartial is set.
  std::optional<bool> stream;
  // While streaming, the answer so far, closed (open strings, arrays and objects closed, a key
  // without its value left out), each time it grows. On the calling thread.
  std::function<void(const nlohmann::json& partial)> onPartial;
  // After each model call (the rung, the attempt, whether it validated, its usage).
  std::function<void(const StructuredAttempt&)> onAttempt;
  // While streaming, each delta as it comes (after onPartial has seen it); false stops the call
  // (CancelledError). On the calling thread.
  ChunkHandler onChunk;
  std::optional<std::chrono::milliseconds> timeout;  // each model call, retries included
  // One deadline for every call of the request (refusals and repairs included): when it
  // passes, the call under way is cancelled and a TimeoutError thrown. nullopt: none beyond
  // `timeout`.
  std::optional<std::chrono::milliseconds> turnTimeout;
  std::stop_token stopToken;           // cancels (CancelledError)
  std::optional<ChatRequest> request;  // replaces ConversationOptions::request (model, ...)
  // Caps of the streaming reader (bytes of the answer, nesting).
  std::size_t maxPartialBytes = std::size_t{4} << 20;
  int maxPartialDepth = 64;
};

struct StructuredResult {
  nlohmann::json value;                                          // the validated answer
  StructuredOutputMode rung = StructuredOutputMode::JsonSchema;  // the rung that gave it
  int attempts = 0;  // model calls made on that rung and the ones before (refusals included)
  TokenUsage usage;  // summed over every call
  Message message;   // the assistant message stored: the answer as JSON text
};

// What runStructured checks before it sends anything: the schema (an object schema within
// kMaxStructuredSchemaBytes and kMaxStructuredSchemaDepth that compiles: a bad `pattern` is
// refused), options.maxRepairs, options.name and options.turnTimeout. Throws ValidationError on
// field "schema", "maxRepairs", "name" or "turnTimeout".
void checkStructuredRequest(const nlohmann::json& schema, const StructuredOptions& options);

// The schema the concise form describes: comma-separated fields `name [type][: description]`,
// type str (the default), int, float or bool; every field required. E.g.
// "name, age int, bio: a short bio" gives
// {"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
//  "bio":{"type":"string","description":"a short bio"}},"required":["name","age","bio"],
//  "additionalProperties":false}.
// Throws ValidationError("schema", ...) naming the bad field.
nlohmann::json conciseSchema(std::string_view text);
// A schema from text: a JSON object when the text starts with '{', else the concise form.
nlohmann::json parseSchemaText(std::string_view text);

// The error for a valid answer that nlohmann's from_json could not read as a C++ type: the
// field named in `what` (a missing key) or the answer as a whole.
StructuredOutputError typedAnswerError(const nlohmann::json& value, const std::string& what);

// The schema of a C++ type for runAs<T>(prompt): T::jsonSchema() by default; specialise this
// trait next to a type that cannot have the static member.
template <class T>
struct JsonSchemaOf {
  static nlohmann::json schema() { return T::jsonSchema(); }
};

}  // namespace parley
