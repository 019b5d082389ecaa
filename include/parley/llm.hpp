// One model call: the request, the result, the stream's deltas and the LlmClient interface
// (the LLM wrapper: generate / generateStream).
//
// ChatRequest and ChatResult are plain values. An LlmClient implementation documents its own
// thread-safety; OpenAiClient (openai_client.hpp) may be called from many threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"
#include "parley/usage.hpp"

namespace parley {

// `response_format`: plain text (the default, not sent), any JSON object, or JSON that
// matches a schema (OpenAI structured outputs).
struct ResponseFormat {
  enum class Kind { Text, JsonObject, JsonSchema };
  Kind kind = Kind::Text;
  std::string schemaName;  // JsonSchema only: json_schema.name
  nlohmann::json schema;   // JsonSchema only: json_schema.schema
  bool strict = true;      // JsonSchema only: json_schema.strict

  static ResponseFormat jsonObject();
  static ResponseFormat jsonSchema(std::string name, nlohmann::json schema, bool strict = true);
};

// How structured output (ConversationManager::runStructured, docs/structured-output.md) is asked
// of an endpoint: a strict response_format json_schema (Anthropic: a forced tool), json_object
// with the schema in a system message, or a forced call of a synthetic tool whose parameters are
// the schema. Auto starts with JsonSchema and steps down the ladder when the server refuses.
enum class StructuredOutputMode { Auto, JsonSchema, JsonObject, Tool };
// "auto", "json_schema", "json_object", "tool".
const char* toString(StructuredOutputMode mode) noexcept;
// The mode a name gives; ValidationError(field, ...) for any other name.
StructuredOutputMode structuredOutputModeFromString(const std::string& name,
                                                    const std::string& field);

struct ChatRequest {
  std::string model;              // empty: the client's default model
  std::vector<Message> messages;  // sent after encodedMessages
  // Messages already written as compact OpenAI JSON text (see encodeMessage() below), sent
  // before `messages`. A conversation that encodes each message once, when it is added, passes
  // its history here so that building a request is a join, not a re-serialisation
  // (docs/architecture.md, "Performance"). Shared pointers: copying a request copies no text.
  std::vector<std::shared_ptr<const std::string>> encodedMessages;
  nlohmann::json tools = nlohmann::json::array();  // OpenAI `tools` array; empty: not sent
  nlohmann::json toolChoice;                       // null: not sent; "auto", "none", {...}
  std::optional<bool> parallelToolCalls;
  // Sent as max_completion_tokens or max_tokens, as ClientOptions::maxTokensField says.
  std::optional<int64_t> maxTokens;
  std::optional<double> temperature;
  std::optional<double> topP;
  std::vector<std::string> stop;
  std::optional<int64_t> seed;
  std::optional<ResponseFormat> responseFormat;
  // Any other body fields; merged in last, so they override everything above.
  nlohmann::json extra = nlohmann::json::object();

  // generate() streams too when set (and assembles the reply); generateStream() always streams.
  bool stream = false;
  // Bounds the whole call, retries and their waits included (the facade's `timeout`).
  // nullopt or <= 0: only the client's own timeouts apply.
  std::optional<std::chrono::milliseconds> timeout;
  // Requesting stop from another thread ends the call with CancelledError within 100 ms.
  std::stop_token stopToken;
};

struct ChatResult {
  Message message;  // the assistant message: all text and all tool calls of the reply
  // Why generation stopped: "stop", "length", "tool_calls", "content_filter", ... When the reply
  // carries tool calls and the server said "stop" or nothing, this is "tool_calls": the tool calls
  // collected decide (docs/architecture.md, "The turn"). "" when the server never said and no tool
  // was called.
  std::string finishReason;
  std::string reportedFinishReason;  // exactly what the server sent ("" if nothing)
  std::optional<TokenUsage> usage;   // nullopt when the server reported none
  std::string id;                    // the response id ("chatcmpl-...")
  std::string model;                 // the model the server says answered
  // The response as a chat.completion object. For a streamed reply it is rebuilt from the
  // chunks in the same shape (id, object, created, model, choices[0].message, finish_reason,
  // usage, system_fingerprint).
  nlohmann::json raw;
};

// One tool call's part of a stream chunk, after the servers' quirks are resolved.
struct ToolCallDelta {
  size_t index = 0;  // position of the call in the assembled message's toolCalls
  std::string id;    // set on the chunk that starts the call (generated if the server sent none)
  std::string name;  // set on the chunk that starts the call, "" afterwards
  std::string arguments;  // the piece of the arguments' JSON text this chunk carried
};

// A provider-run tool call's part of a stream chunk (server_tools.hpp): never a client call,
// never run by parley.
struct ServerToolCallDelta {
  size_t index = 0;   // position among the reply's provider-run calls
  std::string id;     // set on the chunk that starts the call
  std::string name;   // set on the chunk that starts the call ("web_search", ...)
  std::string input;  // the piece of its input's JSON text this chunk carried
};

// What one stream chunk added. The object passed to onChunk is reused for the next chunk:
// copy what you keep.
struct StreamDelta {
  std::string content;    // text added to the reply
  std::string reasoning;  // reasoning text added (reasoning_content / reasoning); not content
  std::vector<ToolCallDelta> toolCalls;              // client tool calls: the caller runs them
  std::vector<ServerToolCallDelta> serverToolCalls;  // provider-run calls: reported only
  std::optional<TokenUsage> usage;                   // usually on the last chunk only
  std::string finishReason;  // as the server sent it, on the chunk that ends the choice

  bool empty() const noexcept {
    return content.empty() && reasoning.empty() && toolCalls.empty() && serverToolCalls.empty() &&
           !usage && finishReason.empty();
  }
  // Empties it, keeping the strings' capacity (the stream readers reuse one per event).
  void clear() noexcept {
    content.clear();
    reasoning.clear();
    toolCalls.clear();
    serverToolCalls.clear();
    usage.reset();
    finishReason.clear();
  }
};

// Returns false to stop the stream: the call then throws CancelledError and returns nothing.
using ChunkHandler = std::function<bool(const StreamDelta&)>;

// The model-facing interface the conversation manager and the executor call.
//
// Failure: both calls throw parley errors (errors.hpp): HttpError, ConnectionError,
// TimeoutError, CancelledError, ProtocolError, ValidationError for a request that cannot be
// sent. Nothing partial is ever returned as if complete.
// One model an endpoint offers (LlmClient::listModels); fields the endpoint did not send are empty.
struct ModelInfo {
  std::string id;           // what ChatRequest::model takes
  std::string ownedBy;      // OpenAI: owned_by
  std::string displayName;  // Anthropic: display_name
  std::optional<std::chrono::system_clock::time_point> created;
  nlohmann::json raw;  // the entry as the endpoint sent it
};

// What telemetry says of an endpoint (docs/telemetry.md); an empty field is unknown.
struct LlmEndpoint {
  std::string provider;      // gen_ai.provider.name: "openai", "anthropic", ...
  std::string address;       // server.address: the base URL's host
  int port = 0;              // server.port
  std::string defaultModel;  // the model a request that names none gets
};

class LlmClient {
 public:
  virtual ~LlmClient() = default;

  // One model call; streams internally when request.stream is set.
  virtual ChatResult generate(const ChatRequest& request) = 0;

  // One streamed model call. onChunk sees each non-empty delta as it arrives, on the calling
  // thread; the result is the assembled reply once the stream has ended properly.
  virtual ChatResult generateStream(const ChatRequest& request, const ChunkHandler& onChunk) = 0;

  // How this endpoint wants messages written; callers that fill ChatRequest::encodedMessages
  // must encode with these.
  virtual MessageJsonOptions messageJsonOptions() const noexcept { return {}; }

  // The structured output mode the endpoint's profile asks for (ClientOptions::structuredOutput).
  virtual StructuredOutputMode structuredOutputMode() const noexcept {
    return StructuredOutputMode::Auto;
  }
  // Whether the endpoint takes ChatRequest::responseFormat (the Anthropic protocol does not: its
  // strict rung is a forced tool, its json_object rung the system prompt alone).
  virtual bool acceptsResponseFormat() const noexcept { return true; }

  // The endpoint as telemetry names it; a client that does not say is unknown.
  virtual LlmEndpoint endpoint() const { return {}; }

  // The models the endpoint offers (GET {base}/models), in its order. ValidationError for a
  // client that cannot list them; the errors of a call otherwise.
  virtual std::vector<ModelInfo> listModels(std::optional<std::chrono::milliseconds> timeout = {},
                                            std::stop_token stopToken = {});
};

// Writes one message as compact OpenAI JSON text: the same value as toJson(message,
// options).dump(), written directly (about 4x faster than building the json value).
std::string encodeMessage(const Message& message, const MessageJsonOptions& options = {});

}  // namespace parley
