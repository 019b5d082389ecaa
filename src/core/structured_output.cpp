// Structured output: the ladder of rungs, the repair loop and the partial answers while
// streaming (docs/structured-output.md).
#include "parley/structured_output.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>

#include "core/call_shape.hpp"
#include "core/turn_deadline.hpp"
#include "model/blanks.hpp"
#include "model/partial_json.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "tools/tool_schema.hpp"

namespace parley {

namespace {

using nlohmann::json;

std::string trim(std::string_view text) {
  return std::string(detail::trimBlanks(text));
}

// Nesting of arrays and objects; stops counting past `cap`.
int depthOf(const json& value, int cap) {
  if (!value.is_structured() || cap <= 0) return 0;
  int deepest = 0;
  for (const json& child : value)
    deepest = std::max(deepest, depthOf(child, cap - 1));
  return deepest + 1;
}

void checkSchema(const json& schema) {
  if (!schema.is_object()) {
    throw ValidationError("schema",
                          "must be a JSON Schema object, got " + std::string(schema.type_name()));
  }
  if (schema.value("type", json()) != "object") {
    throw ValidationError("schema",
                          "the answer's schema must have \"type\": \"object\" (strict JSON "
                          "Schema output and tool parameters both require an object)");
  }
  if (depthOf(schema, kMaxStructuredSchemaDepth + 1) > kMaxStructuredSchemaDepth) {
    throw ValidationError(
        "schema", "nested deeper than its cap of " + std::to_string(kMaxStructuredSchemaDepth));
  }
  const size_t bytes = schema.dump().size();
  if (bytes > kMaxStructuredSchemaBytes) {
    throw ValidationError("schema", std::to_string(bytes) + " bytes is over its cap of " +
                                        std::to_string(kMaxStructuredSchemaBytes));
  }
}

// The rung a refusal left each client at, for the life of the process.
class RefusalMemory {
 public:
  StructuredOutputMode floor(const std::shared_ptr<LlmClient>& client) {
    std::lock_guard lock(mutex_);
    auto it = floors_.find(client);
    return it == floors_.end() ? StructuredOutputMode::JsonSchema : it->second;
  }
  void lower(const std::shared_ptr<LlmClient>& client, StructuredOutputMode to) {
    std::lock_guard lock(mutex_);
    std::erase_if(floors_, [](const auto& entry) { return entry.first.expired(); });
    StructuredOutputMode& floor = floors_[client];
    floor = std::max(floor, to);
  }

 private:
  std::mutex mutex_;
  std::map<std::weak_ptr<LlmClient>, StructuredOutputMode, std::owner_less<>> floors_;
};

RefusalMemory& refusals() {
  static RefusalMemory memory;
  return memory;
}

// A 400 that names the response format: the server does not take this rung.
bool isRefusal(const HttpError& e) {
  if (e.status() != 400) return false;
  std::string text = e.body() + " " + e.apiMessage();
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (std::string_view word : {"response_format", "json_schema", "json_object", "text.format"})
    if (text.find(word) != std::string::npos) return true;
  return false;
}

std::optional<StructuredOutputMode> nextRung(StructuredOutputMode rung) {
  switch (rung) {
    case StructuredOutputMode::Auto:
    case StructuredOutputMode::JsonSchema:
      return StructuredOutputMode::JsonObject;
    case StructuredOutputMode::JsonObject:
      return StructuredOutputMode::Tool;
    case StructuredOutputMode::Tool:
      return std::nullopt;
  }
  return std::nullopt;
}

// The answer in a reply's text: the JSON alone, or inside one Markdown code fence.
std::string answerText(const std::string& content) {
  std::string text = trim(content);
  if (text.rfind("```", 0) == 0 && text.size() >= 6 && text.substr(text.size() - 3) == "```") {
    const size_t firstLine = text.find('\n');
    if (firstLine != std::string::npos && firstLine < text.size() - 3)
      text = trim(std::string_view(text).substr(firstLine + 1, text.size() - 3 - firstLine - 1));
  }
  return text;
}

std::string schemaInstruction(const json& schema) {
  return "Reply with a single JSON value that matches this JSON Schema, and nothing else (no "
         "prose, no code fence):\n" +
         schema.dump();
}

std::string repairPrompt(const std::vector<SchemaFailure>& failures) {
  std::string text = "Your answer is not valid:\n";
  for (const SchemaFailure& f : failures)
    text += "- " + f.message + "\n";
  text += "Reply again with only the corrected JSON value.";
  return text;
}

}  // namespace

nlohmann::json conciseSchema(std::string_view text) {
  json properties = json::object();
  json required = json::array();
  size_t start = 0;
  int index = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string field = trim(text.substr(start, comma - start));
    const std::string where = "schema.fields[" + std::to_string(index) + "]";
    start = comma + 1;
    ++index;
    if (field.empty()) {
      if (comma == text.size() && index > 1) break;  // a trailing comma
      throw ValidationError(where, "is empty; write fields as `name [type][: description]`");
    }
    std::string head = field;
    std::string description;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      head = trim(std::string_view(field).substr(0, colon));
      description = trim(std::string_view(field).substr(colon + 1));
    }
    std::string name = head;
    std::string type = "str";
    if (const size_t space = head.find_first_of(" \t"); space != std::string::npos) {
      name = head.substr(0, space);
      type = trim(std::string_view(head).substr(space));
    }
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
        })) {
      throw ValidationError(where,
                            "\"" + name + "\" is not a field name (letters, digits, _ or -)");
    }
    static const std::map<std::string, std::string> kTypes = {
        {"str", "string"}, {"int", "integer"}, {"float", "number"}, {"bool", "boolean"}};
    const auto it = kTypes.find(type);
    if (it == kTypes.end()) {
      throw ValidationError(
          where, "unknown type \"" + type + "\" of \"" + name + "\": use str, int, float or bool");
    }
    if (properties.contains(name)) throw ValidationError(where, "\"" + name + "\" appears twice");
    json property = {{"type", it->second}};
    if (!description.empty()) property["description"] = description;
    properties[name] = std::move(property);
    required.push_back(name);
    if (comma == text.size()) break;
  }
  if (properties.empty()) throw ValidationError("schema", "names no field");
  return {{"type", "object"},
          {"properties", std::move(properties)},
          {"required", std::move(required)},
          {"additionalProperties", false}};
}

nlohmann::json parseSchemaText(std::string_view text) {
  const std::string trimmed = trim(text);
  if (trimmed.size() > kMaxStructuredSchemaBytes) {
    throw ValidationError("schema", std::to_string(trimmed.size()) + " bytes is over its cap of " +
                                        std::to_string(kMaxStructuredSchemaBytes));
  }
  if (!trimmed.empty() && trimmed.front() == '{') {
    try {
      return json::parse(trimmed);
    } catch (const json::parse_error& e) {
      throw ValidationError("schema", std::string("not valid JSON: ") + e.what());
    }
  }
  return conciseSchema(trimmed);
}

StructuredOutputError typedAnswerError(const nlohmann::json& value, const std::string& what) {
  StructuredOutputError::Details d;
  d.path = "answer";
  // nlohmann names a missing key ("key 'age' not found"); a wrong type it does not place.
  if (const size_t key = what.find("key '"); key != std::string::npos) {
    const size_t end = what.find('\'', key + 5);
    if (end != std::string::npos) d.path = what.substr(key + 5, end - key - 5);
  }
  d.messages.push_back(d.path + ": cannot be read as the type asked for: " + what);
  d.reply = value.dump();
  return StructuredOutputError(std::move(d));
}

namespace {

// checkStructuredRequest, giving the compiled schema.
CompiledSchema compileStructured(const json& schema, const StructuredOptions& options) {
  if (options.maxRepairs < 0 || options.maxRepairs > kMaxStructuredRepairs) {
    throw ValidationError("maxRepairs",
                          "must be between 0 and " + std::to_string(kMaxStructuredRepairs));
  }
  if (!isValidToolName(options.name)) {
    throw ValidationError("name", "\"" + options.name +
                                      "\" is not a valid name: use 1 to 64 letters, digits, "
                                      "'_' or '-'");
  }
  if (options.turnTimeout && options.turnTimeout->count() <= 0) {
    throw ValidationError("turnTimeout", "must be positive");
  }
  checkSchema(schema);
  return CompiledSchema(schema, "schema", "answer");  // a bad pattern throws here
}

}  // namespace

void checkStructuredRequest(const nlohmann::json& schema, const StructuredOptions& options) {
  compileStructured(schema, options);
}

nlohmann::json ConversationManager::runStructured(const std::string& prompt,
                                                  const nlohmann::json& schema,
                                                  const StructuredOptions& options) {
  return structured(prompt, schema, options, nullptr).value;
}

StructuredResult ConversationManager::runStructuredResult(const std::string& prompt,
                                                          const nlohmann::json& schema,
                                                          const StructuredOptions& options) {
  return structured(prompt, schema, options, nullptr);
}

StructuredResult ConversationManager::structured(
    const std::string& prompt, const nlohmann::json& schema, const StructuredOptions& options,
    const std::function<void(const nlohmann::json&)>& accept) {
  const std::shared_ptr<LlmClient>& llm = ConversationManager::options().llm;
  if (!llm) throw ValidationError("options.llm", "this conversation has no model attached");
  const CompiledSchema compiled = compileStructured(schema, options);
  detail::TurnDeadline deadline(options.turnTimeout, options.stopToken);

  const StructuredOutputMode chosen = options.mode.value_or(llm->structuredOutputMode());
  const bool ladder = chosen == StructuredOutputMode::Auto;
  StructuredOutputMode rung = ladder ? refusals().floor(llm) : chosen;
  const bool responseFormat = llm->acceptsResponseFormat();

  LlmCallOptions callOptions;
  callOptions.stream = options.stream      ? options.stream
                       : options.onPartial ? std::optional(true)
                                           : std::nullopt;
  callOptions.stopToken = deadline.token();
  callOptions.request = options.request;

  // Each attempt's view: the view before the call, then the prompt and each reply kept.
  const MessageMarkMap before = getMarkMap();
  const size_t startBatch = before.currentBatch;
  std::vector<MessageStore::Index> base(before.originalIndices.begin(),
                                        before.originalIndices.end());
  const auto newBatch = [&] {
    modifyStore([](MessageStore& s) {
      std::vector<MessageStore::Index> view;
      s.view().forEach(0, s.viewSize(), [&](MessageStore::Index i) { view.push_back(i); });
      s.commitView(view);
    });
  };
  const size_t storedBefore = storageSize();
  const auto restore = [&] {
    rollbackToBatch(startBatch);
    if (storageSize() != storedBefore) persistIfWhole();  // the hidden attempts, saved too
  };

  StructuredResult result;
  std::vector<Message> pending{Message::user(prompt)};
  std::optional<size_t> promptIndex;  // storage index of the prompt once stored
  int attempt = 0;                    // on the current rung
  std::string lastReply;
  std::vector<SchemaFailure> failures;
  std::unique_ptr<PartialJson> partial;
  json shown;  // the partial answer last shown
  const auto showPartial = [&](const StreamDelta& delta, bool tool) {
    if (!partial) return;
    std::string piece = delta.content;
    if (tool) {
      for (const ToolCallDelta& d : delta.toolCalls)
        if (d.index == 0) piece += d.arguments;
    }
    if (piece.empty()) return;
    try {
      if (partial->append(piece)) {
        json now = partial->current();
        if (now != shown) {
          shown = now;
          options.onPartial(shown);
        }
      }
    } catch (const ProtocolError&) {
      partial.reset();  // not JSON as it comes: the whole reply is checked at the end
    }
  };

  for (;;) {
    const bool tool = rung == StructuredOutputMode::Tool ||
                      (rung == StructuredOutputMode::JsonSchema && !responseFormat);
    CallShape shape;
    shape.request = [&](ChatRequest& request, const MessageJsonOptions& jsonOptions) {
      request.tools = json::array();
      request.toolChoice = nullptr;
      request.responseFormat.reset();
      if (tool) {
        request.tools.push_back(
            {{"type", "function"},
             {"function",
              {{"name", options.name},
               {"description", options.description.empty()
                                   ? "Give the answer as this function's arguments."
                                   : options.description},
               {"parameters", schema}}}});
        request.toolChoice = {{"type", "function"}, {"function", {{"name", options.name}}}};
      } else if (rung == StructuredOutputMode::JsonSchema) {
        request.responseFormat = ResponseFormat::jsonSchema(options.name, schema, true);
      } else {
        if (responseFormat) request.responseFormat = ResponseFormat::jsonObject();
        request.encodedMessages.insert(
            request.encodedMessages.begin(),
            std::make_shared<const std::string>(
                encodeMessage(Message::system(schemaInstruction(schema)), jsonOptions)));
      }
    };
    // A forced tool's arguments are the answer, stored as the reply's text: the history keeps
    // no tool call without its result.
    shape.reply = [&](ChatResult& reply) {
      if (!tool) return;
      for (const ToolCall& c : reply.message.toolCalls) {
        if (c.name == options.name) {
          reply.message.content = c.arguments;
          break;
        }
      }
      reply.message.toolCalls.clear();
      reply.finishReason = "stop";
    };
    if (options.onPartial) {
      shown = nullptr;
      partial = std::make_unique<PartialJson>(
          PartialJsonLimits{options.maxPartialBytes, options.maxPartialDepth});
    }
    if (options.onPartial || options.onChunk) {
      callOptions.onChunk = [&](const StreamDelta& delta) {
        showPartial(delta, tool);
        return !options.onChunk || options.onChunk(delta);
      };
    }

    ++attempt;
    ++result.attempts;
    StructuredAttempt report;
    report.rung = rung;
    report.attempt = attempt;
    ChatResult reply;
    try {
      callOptions.timeout = deadline.callTimeout(options.timeout);
      newBatch();
      try {
        reply = ConversationManager::call(pending, callOptions, nullptr, nullptr, nullptr, &shape);
      } catch (const CancelledError&) {
        deadline.rethrow();
      } catch (const TimeoutError&) {
        deadline.rethrow();
      }
    } catch (const HttpError& e) {
      if (!ladder || !isRefusal(e) || !nextRung(rung)) {
        restore();
        throw;
      }
      restore();
      report.refused = true;
      report.errors.push_back(e.what());
      if (options.onAttempt) options.onAttempt(report);
      rung = *nextRung(rung);
      refusals().lower(llm, rung);
      // The refused rung sent nothing that was kept: start over on the next one.
      pending = {Message::user(prompt)};
      promptIndex.reset();
      attempt = 0;
      continue;
    } catch (...) {
      restore();
      throw;
    }
    if (!promptIndex) promptIndex = storageSize() - 2;
    report.usage = reply.usage;
    if (reply.usage) addUsage(result.usage, *reply.usage);
    lastReply = reply.message.content;

    failures.clear();
    json value;
    try {
      value = json::parse(answerText(lastReply));
      failures = compiled.failures(value, {deadline.token(), std::nullopt});
    } catch (const json::exception& e) {
      failures.push_back({"answer", std::string("answer: not valid JSON: ") + e.what()});
    } catch (const Error&) {  // the check was stopped: cancelled, or the turn's deadline
      restore();
      deadline.rethrow();
    }
    report.valid = failures.empty();
    for (const SchemaFailure& f : failures)
      report.errors.push_back(f.message);
    if (options.onAttempt) options.onAttempt(report);

    if (failures.empty()) {
      try {
        if (accept) accept(value);
      } catch (...) {
        restore();
        throw;
      }
      if (attempt > 1) {
        // Show the prompt and the valid answer alone; the repairs stay in the batches before.
        const auto answer = static_cast<MessageStore::Index>(storageSize() - 1);
        modifyStore([&](MessageStore& s) {
          std::vector<MessageStore::Index> view = base;
          view.push_back(static_cast<MessageStore::Index>(*promptIndex));
          view.push_back(answer);
          s.commitView(view);
        });
        persistIfWhole();
      }
      result.value = std::move(value);
      result.rung = rung;
      result.message = reply.message;
      return result;
    }
    if (attempt > options.maxRepairs) {
      restore();
      StructuredOutputError::Details d;
      d.path = failures.front().path;
      for (const SchemaFailure& f : failures)
        d.messages.push_back(f.message);
      d.rung = toString(rung);
      d.attempts = result.attempts;
      d.reply = lastReply;
      throw StructuredOutputError(std::move(d));
    }
    pending = {Message::user(repairPrompt(failures))};
  }
}

}  // namespace parley
