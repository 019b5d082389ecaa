// The Gemini request writer: a ChatRequest (OpenAI-shaped transcript and tools) as the body of
// POST {base}/models/{model}:generateContent (or :streamGenerateContent?alt=sse; the body is the
// same, docs/protocols.md "Gemini").
//
// - system messages -> `systemInstruction` (one text part each);
// - user parts -> text, `inlineData` (image, audio and file bytes), `fileData` (an image URL);
// - assistant messages -> `model` contents: the parts Gemini sent, exactly as kept in
//   extra["gemini_parts"] (thought parts and every `thoughtSignature` included), else text and
//   `functionCall` parts (with the call's id), whose first call carries the validator-skipping
//   signature Google documents for calls made elsewhere (another provider's signatures are never
//   sent);
// - tool messages -> `functionResponse` parts ({output} or {error}), in a `user` content;
//   consecutive contents of one role are merged;
// - OpenAI tools -> functionDeclarations with `parametersJsonSchema` (geminiSchema());
//   tool_choice -> toolConfig.functionCallingConfig; max_tokens, temperature, top_p, stop, seed,
//   response_format -> generationConfig;
// - ClientOptions::defaultParameters and ChatRequest::extra merged last: `generationConfig` key by
//   key, `tools` appended (googleSearch, codeExecution, ...), anything else (safetySettings,
//   cachedContent, ...) as given.
// The same request always gives the same bytes, so implicit caching hits.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "client/provider_fields.hpp"
#include "parley/llm.hpp"
#include "parley/openai_client.hpp"

namespace parley::detail {

// The signature Google documents for a function call Gemini did not make (a transcript from
// another model): it skips the validation a missing signature would fail.
inline constexpr std::string_view kSkipSignature = "skip_thought_signature_validator";

// Throws ValidationError naming the field for a request Gemini cannot take.
std::string buildGeminiBody(const ChatRequest& request, const ClientOptions& options);

enum class GeminiMethod { Generate, Stream, CountTokens };
// "{base}/models/{model}:generateContent", ":streamGenerateContent?alt=sse" or ":countTokens".
std::string geminiUrl(const ChatRequest& request, const ClientOptions& options,
                      GeminiMethod method);

// The model parts `content` and `calls` stand for (text, then one functionCall part per call, with
// the call's id), without any signature.
nlohmann::ordered_json geminiModelParts(const std::string& content,
                                        const std::vector<ToolCall>& calls);

// A JSON Schema as the subset Gemini's parametersJsonSchema and responseJsonSchema take: the
// keywords it knows kept, `const` as a one-value `enum`, `definitions` as `$defs`, annotations
// and narrowing keywords it does not know (pattern, minLength, ...) dropped; a keyword that would
// change what the schema accepts if dropped (allOf, not, if, patternProperties, ...) throws
// ValidationError naming `field` and the keyword's path.
nlohmann::ordered_json geminiSchema(const nlohmann::json& schema, const std::string& field);

}  // namespace parley::detail
