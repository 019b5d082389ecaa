// The Gemini protocol without a server: the request writer (contents, roles merged, the parts a
// reply kept sent back exactly, signatures of calls made elsewhere, function responses, tools and
// their schemas, generation config), the reply reader (streamed pieces joined, signatures kept,
// usage in one meaning, finish reasons, blocked replies, errors) and its caps.
#include <gtest/gtest.h>

#include "client/gemini_reply.hpp"
#include "client/gemini_request.hpp"
#include "client/provider_fields.hpp"
#include "parley/errors.hpp"
#include "parley/gemini_client.hpp"
#include "parley/openai_client.hpp"
#include "parley/part.hpp"
#include "parley/protocol.hpp"
#include "parley/server_tools.hpp"
#include "parley/transport.hpp"

namespace parley::detail {
namespace {

using nlohmann::json;

ClientOptions gemini() {
  ClientOptions o;
  o.protocol = Protocol::Gemini;
  o.baseUrl = "https://generativelanguage.googleapis.com/v1beta";
  o.model = "gemini-3-flash";
  return o;
}

json bodyOf(const ChatRequest& request, const ClientOptions& options = gemini()) {
  return json::parse(buildGeminiBody(request, options));
}

ChatResult readStream(const std::vector<std::string>& chunks) {
  GeminiAssembler assembler;
  for (const auto& c : chunks)
    assembler.addEvent(c);
  return assembler.finish();
}

TEST(GeminiProtocol, NamesAndUrls) {
  EXPECT_EQ(toString(Protocol::Gemini), "gemini");
  EXPECT_EQ(parseProtocol("gemini"), Protocol::Gemini);
  ChatRequest request;
  EXPECT_EQ(
      geminiUrl(request, gemini(), GeminiMethod::Generate),
      "https://generativelanguage.googleapis.com/v1beta/models/gemini-3-flash:generateContent");
  request.model = "models/gemini-2.5-pro";
  EXPECT_EQ(geminiUrl(request, gemini(), GeminiMethod::Stream),
            "https://generativelanguage.googleapis.com/v1beta/models/"
            "gemini-2.5-pro:streamGenerateContent?alt=sse");
  EXPECT_EQ(geminiUrl(request, gemini(), GeminiMethod::CountTokens),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:countTokens");
}

TEST(GeminiProtocol, WritesTheTranscriptAsContents) {
  ChatRequest request;
  Message foreign = Message::assistant("Checking.");
  foreign.toolCalls = {ToolCall{"toolu_1", "get_weather", R"({"city":"Oslo","unit":"C"})"},
                       ToolCall{"toolu_2", "get_time", ""}};
  foreign.extra["thinking_blocks"] = json::array({{{"type", "thinking"}, {"signature", "anthro"}}});
  request.messages = {
      Message::system("Be terse."),    Message::user("Weather?"),        foreign,
      Message::tool("toolu_1", "-3C"), Message::tool("toolu_2", "noon"), Message::user("thanks")};
  request.messages[4].extra["is_error"] = true;
  const json body = bodyOf(request);
  EXPECT_EQ(body["systemInstruction"], json::parse(R"({"parts":[{"text":"Be terse."}]})"));
  const json& contents = body["contents"];
  ASSERT_EQ(contents.size(), 3u);  // user, model, user (two responses and the text merged)
  EXPECT_EQ(contents[0], json::parse(R"({"role":"user","parts":[{"text":"Weather?"}]})"));
  // A call made elsewhere: the documented validator-skipping signature on the first call only;
  // the other provider's signature is not sent.
  EXPECT_EQ(contents[1], json::parse(R"({"role":"model","parts":[{"text":"Checking."},
      {"functionCall":{"id":"toolu_1","name":"get_weather","args":{"city":"Oslo","unit":"C"}},
       "thoughtSignature":"skip_thought_signature_validator"},
      {"functionCall":{"id":"toolu_2","name":"get_time","args":{}}}]})"));
  EXPECT_EQ(contents[2], json::parse(R"({"role":"user","parts":[
      {"functionResponse":{"id":"toolu_1","name":"get_weather","response":{"output":"-3C"}}},
      {"functionResponse":{"id":"toolu_2","name":"get_time","response":{"error":"noon"}}},
      {"text":"thanks"}]})"));
  EXPECT_EQ(body.dump().find("anthro"), std::string::npos);
  // Byte-stable: the same request, the same bytes; args keep the model's key order.
  EXPECT_EQ(buildGeminiBody(request, gemini()), buildGeminiBody(request, gemini()));
  EXPECT_NE(buildGeminiBody(request, gemini()).find(R"({"city":"Oslo","unit":"C"})"),
            std::string::npos);
}

TEST(GeminiProtocol, KeptPartsGoBackExactlyWithTheirIds) {
  Message reply = Message::assistant("");
  reply.toolCalls = {ToolCall{"fc_9", "f", "{}"}};
  reply.extra["gemini_parts"] = json::parse(
      R"([{"text":"plan","thought":true},{"functionCall":{"id":"fc_9","name":"f","args":{}},"thoughtSignature":"SIG=="}])");
  ChatRequest request;
  request.messages = {Message::user("go"), reply, Message::tool("fc_9", "ok")};
  const json body = bodyOf(request);
  EXPECT_EQ(body["contents"][1]["parts"], reply.extra["gemini_parts"]);
  EXPECT_EQ(body["contents"][2]["parts"][0]["functionResponse"],
            json::parse(R"({"id":"fc_9","name":"f","response":{"output":"ok"}})"));
  // A result that answers no call cannot be named.
  request.messages = {Message::user("go"), Message::tool("nope", "x")};
  EXPECT_THROW(bodyOf(request), ValidationError);
}

TEST(GeminiProtocol, ToolsConfigAndGenerationSettings) {
  ChatRequest request;
  request.messages = {Message::user("hi")};
  request.tools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "description":"Weather","parameters":{"$schema":"x","type":"object","properties":{
        "city":{"type":"string","pattern":"^[A-Z]","const":"Oslo"},
        "when":{"$ref":"#/definitions/day"}},"definitions":{"day":{"type":"string"}}}}}])");
  request.toolChoice = json::parse(R"({"type":"function","function":{"name":"get_weather"}})");
  request.maxTokens = 100;
  request.temperature = 0.5;
  request.stop = {"END"};
  request.responseFormat = ResponseFormat::jsonSchema("out", json::parse(R"({"type":"object"})"));
  ClientOptions options = gemini();
  options.defaultParameters = json::parse(
      R"({"generationConfig":{"thinkingConfig":{"includeThoughts":true}},"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]})");
  request.extra = json::parse(
      R"({"generationConfig":{"thinkingConfig":{"thinkingBudget":1024}},"tools":[{"googleSearch":{}}]})");
  const json body = bodyOf(request, options);
  EXPECT_EQ(body["tools"], json::parse(R"([{"functionDeclarations":[{"name":"get_weather",
      "description":"Weather","parametersJsonSchema":{"type":"object","properties":{
        "city":{"type":"string","enum":["Oslo"]},"when":{"$ref":"#/$defs/day"}},
        "$defs":{"day":{"type":"string"}}}}]},{"googleSearch":{}}])"));
  EXPECT_EQ(
      body["toolConfig"],
      json::parse(
          R"({"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}})"));
  EXPECT_EQ(body["generationConfig"], json::parse(R"({"temperature":0.5,"maxOutputTokens":100,
      "stopSequences":["END"],"responseMimeType":"application/json",
      "responseJsonSchema":{"type":"object"},
      "thinkingConfig":{"includeThoughts":true,"thinkingBudget":1024}})"));
  EXPECT_EQ(body["safetySettings"][0]["threshold"], "BLOCK_NONE");
}

TEST(GeminiProtocol, SchemaKeywordsWithoutAFormAreRefusedByName) {
  try {
    geminiSchema(
        json::parse(R"({"type":"object","properties":{"a":{"allOf":[{"type":"string"}]}}})"),
        "tools[0]");
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("\"allOf\" at #/properties/a/allOf"), std::string::npos)
        << e.what();
  }
  json deep = json::object();
  for (int i = 0; i < 80; ++i)
    deep = json{{"type", "array"}, {"items", deep}};
  EXPECT_THROW(geminiSchema(deep, "tools[0]"), ValidationError);
}

// Thought pieces, text pieces and a last empty part with the signature, as Gemini 3 streams.
const std::vector<std::string> kTextStream = {
    R"({"candidates":[{"content":{"parts":[{"text":"Let me ","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":12},"modelVersion":"gemini-3-flash","responseId":"r1"})",
    R"({"candidates":[{"content":{"parts":[{"text":"think.","thought":true}],"role":"model"},"index":0}]})",
    R"({"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"},"index":0}]})",
    R"({"candidates":[{"content":{"parts":[{"text":" world"}],"role":"model"},"index":0}]})",
    R"({"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"SIG1"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":5,"thoughtsTokenCount":7,"cachedContentTokenCount":8,"totalTokenCount":24}})"};

TEST(GeminiProtocol, ReadsAStreamJoiningPiecesAndKeepingTheSignature) {
  GeminiAssembler assembler;
  std::string content, reasoning;
  for (const auto& c : kTextStream) {
    const StreamDelta& d = assembler.addEvent(c);
    content += d.content;
    reasoning += d.reasoning;
  }
  EXPECT_EQ(content, "Hello world");
  EXPECT_EQ(reasoning, "Let me think.");
  ChatResult r = assembler.finish();
  EXPECT_EQ(r.message.content, "Hello world");
  EXPECT_EQ(r.message.extra["reasoning_content"], "Let me think.");
  EXPECT_EQ(r.message.extra["gemini_parts"],
            json::parse(R"([{"text":"Let me think.","thought":true},
      {"text":"Hello world","thoughtSignature":"SIG1"}])"));
  EXPECT_EQ(r.finishReason, "stop");
  EXPECT_EQ(r.reportedFinishReason, "STOP");
  EXPECT_EQ(r.id, "r1");
  EXPECT_EQ(r.model, "gemini-3-flash");
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->promptTokens, 12);
  EXPECT_EQ(r.usage->completionTokens, 12);  // candidates + thoughts
  EXPECT_EQ(r.usage->totalTokens, 24);
  EXPECT_EQ(r.usage->raw["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(r.usage->raw["completion_tokens_details"]["reasoning_tokens"], 7);
}

// The usual chunks are read without a json value (simdjson); a chunk with anything else takes the
// full path. Both read the same reply.
TEST(GeminiProtocol, TheFastAndTheFullPathReadTheSame) {
  std::vector<std::string> full;
  for (const std::string& chunk : kTextStream)
    full.push_back(R"({"promptFeedback":{},)" + chunk.substr(1));  // a key the fast path skips
  const ChatResult fast = readStream(kTextStream);
  const ChatResult slow = readStream(full);
  EXPECT_EQ(fast.message, slow.message);
  EXPECT_EQ(fast.usage->raw, slow.usage->raw);
  EXPECT_EQ(fast.id, slow.id);
  // An escape and a non-ASCII piece read alike.
  const std::string escaped =
      R"({"candidates":[{"content":{"parts":[{"text":"a\"b\u00e9 \n"}],"role":"model"},"index":0}]})";
  const std::string end =
      R"({"candidates":[{"content":{"parts":[{"text":"."}]},"finishReason":"STOP","index":0}]})";
  EXPECT_EQ(readStream({escaped, end}).message.content, "a\"b\u00e9 \n.");
  // A long stream of pieces costs no copy of the text so far per piece (joined once).
  std::vector<std::string> many(
      5000, R"({"candidates":[{"content":{"parts":[{"text":"word "}]},"index":0}]})");
  many.push_back(end);
  EXPECT_EQ(readStream(many).message.content.size(), 5000u * 5 + 1);
}

TEST(GeminiProtocol, ReadsParallelCallsWithAndWithoutIds) {
  const ChatResult r = resultFromGeminiResponse(
      R"({"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{"z":1,"a":2}},"thoughtSignature":"S"},{"functionCall":{"id":"c2","name":"b"}}],"role":"model"},"finishReason":"STOP","index":0}]})");
  ASSERT_EQ(r.message.toolCalls.size(), 2u);
  EXPECT_EQ(r.message.toolCalls[0].name, "a");
  EXPECT_EQ(r.message.toolCalls[0].arguments, R"({"z":1,"a":2})");
  EXPECT_EQ(r.message.toolCalls[0].id.rfind("call_", 0), 0u);  // generated
  EXPECT_EQ(r.message.toolCalls[1].id, "c2");
  EXPECT_EQ(r.message.toolCalls[1].arguments, "{}");
  EXPECT_EQ(r.finishReason, "tool_calls");
  // The kept parts have no generated id: the next request sends what Gemini sent.
  EXPECT_FALSE(r.message.extra["gemini_parts"][0]["functionCall"].contains("id"));
  EXPECT_EQ(r.message.extra["gemini_parts"][0]["thoughtSignature"], "S");
  // A plain text reply keeps nothing beside its content.
  const ChatResult plain = resultFromGeminiResponse(
      R"({"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"},"finishReason":"MAX_TOKENS","index":0}]})");
  EXPECT_FALSE(plain.message.extra.contains("gemini_parts"));
  EXPECT_EQ(plain.finishReason, "length");
}

TEST(GeminiProtocol, BlockedRepliesAreRefusalsWithTheReasonKept) {
  const ChatResult safety = resultFromGeminiResponse(
      R"({"candidates":[{"content":{"role":"model"},"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH","blocked":true}]}]})");
  EXPECT_EQ(safety.finishReason, "content_filter");
  EXPECT_EQ(safety.reportedFinishReason, "SAFETY");
  EXPECT_NE(safety.message.extra.value("refusal", "").find("SAFETY"), std::string::npos);
  const ChatResult prompt = resultFromGeminiResponse(
      R"({"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":3,"totalTokenCount":3}})");
  EXPECT_EQ(prompt.reportedFinishReason, "PROHIBITED_CONTENT");
  EXPECT_NE(prompt.message.extra.value("refusal", "").find("blocked the prompt"),
            std::string::npos);
  const ChatResult other = resultFromGeminiResponse(
      R"({"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"MALFORMED_FUNCTION_CALL","index":0}]})");
  EXPECT_EQ(other.finishReason, "malformed_function_call");
}

// Grounding, citations and safety ratings are kept as sent (the last value of a stream), never
// sent back, and the grounding's web searches are counted for billing.
TEST(GeminiProtocol, GroundingAndSafetyAreKeptAndItsSearchesCounted) {
  const ChatResult r = readStream(
      {R"({"candidates":[{"content":{"role":"model","parts":[{"text":"Spain won"}]},"index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"NEGLIGIBLE"}]}]})",
       R"({"candidates":[{"content":{"role":"model","parts":[{"text":" Euro 2024."}]},"finishReason":"STOP","index":0,"groundingMetadata":{"webSearchQueries":["euro 2024 winner","uefa euro 2024 final"],"groundingChunks":[{"web":{"uri":"https://vertexaisearch.cloud.google.com/grounding-api-redirect/x","title":"uefa.com"}}],"groundingSupports":[{"segment":{"startIndex":0,"endIndex":9,"text":"Spain won"},"groundingChunkIndices":[0]}]},"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"LOW"}]}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15}})"});
  EXPECT_EQ(r.message.content, "Spain won Euro 2024.");
  const json& kept = r.message.extra.at(std::string(kGeminiMetadata));
  EXPECT_EQ(kept["groundingMetadata"]["groundingChunks"][0]["web"]["title"], "uefa.com");
  EXPECT_EQ(kept["safetyRatings"][0]["probability"], "LOW");  // the last one sent
  EXPECT_EQ(webSearchCount(r.message), 2u);
  for (Protocol p :
       {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic, Protocol::Gemini}) {
    ClientOptions o;
    o.protocol = p;
    EXPECT_FALSE(sendsField(kGeminiMetadata, o));
  }
  ChatRequest next;
  next.messages = {Message::user("who won?"), r.message, Message::user("and 2020?")};
  EXPECT_EQ(bodyOf(next).dump().find("groundingMetadata"), std::string::npos);
  // Past the cap, an error naming the field.
  const std::string huge(kMaxServerToolResultBytes, 'x');
  EXPECT_THROW(
      resultFromGeminiResponse(
          R"({"candidates":[{"index":0,"finishReason":"STOP","groundingMetadata":{"webSearchQueries":[")" +
          huge + R"("]}}]})"),
      ProtocolError);
}

// Generated images come out as image parts, decoded, thoughts and undecodable data left out,
// from Gemini's parts and from Responses' image_generation_call items.
TEST(GeminiProtocol, GeneratedImagesAreImageParts) {
  const ChatResult r = resultFromGeminiResponse(
      R"({"candidates":[{"content":{"role":"model","parts":[{"text":"Here."},)"
      R"({"inlineData":{"mimeType":"image/png","data":"iVBORw=="},"thought":true},)"
      R"({"inlineData":{"mimeType":"image/png","data":"iVBORw0K"}},)"
      R"({"inlineData":{"mimeType":"image/webp","data":"not base64!"}},)"
      R"({"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}}]},"finishReason":"STOP","index":0}]})");
  const std::vector<Part> images = generatedImagesOf(r.message);
  ASSERT_EQ(images.size(), 1u);
  EXPECT_EQ(images[0].kind, PartKind::Image);
  EXPECT_EQ(images[0].mimeType, "image/png");
  EXPECT_EQ(images[0].bytes, std::string("\x89PNG\r\n", 6));
  Message responses = Message::assistant("");
  responses.extra[std::string(kResponseOutput)] = json::parse(
      R"([{"type":"image_generation_call","id":"ig_1","status":"completed","output_format":"jpeg","result":"/9j/"}])");
  const std::vector<Part> made = generatedImagesOf(responses);
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].mimeType, "image/jpeg");
  EXPECT_EQ(made[0].bytes, std::string("\xff\xd8\xff", 3));
  EXPECT_TRUE(generatedImagesOf(Message::user("iVBORw0K")).empty());
}

// Keeps what each request carried and answers with one whole reply (a body, or one event).
class KeyCapture : public HttpTransport {
 public:
  void send(const HttpRequest& request, HttpReplySink& sink) override {
    urls.emplace_back(request.url);
    headers.emplace_back(request.headers.begin(), request.headers.end());
    sink.reset();
    if (request.method == HttpMethod::Get) {
      sink.onBody(R"({"models":[{"name":"models/gemini-3-flash"}]})", HttpReplyInfo{200, ""});
      return;
    }
    const std::string reply =
        R"({"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]},"finishReason":"STOP","index":0}]})";
    if (request.stream) {
      SseEvent event;
      event.data = reply;
      sink.onEvent(event, HttpReplyInfo{200, ""});
      sink.onStreamEnd(HttpReplyInfo{200, ""});
    } else {
      sink.onBody(reply, HttpReplyInfo{200, ""});
    }
  }
  std::vector<std::string> urls;
  std::vector<std::vector<std::string>> headers;
};

// api_key_in_query: every Gemini request carries the key as ?key= (after alt=sse when
// streaming) and no x-goog-api-key header; any URL shown says key=***; another protocol
// refuses the option.
TEST(GeminiProtocol, TheKeyCanGoOnTheUrlAndIsNeverShown) {
  auto capture = std::make_shared<KeyCapture>();
  ClientOptions o = gemini();
  o.apiKey = "AIza+secret/1";
  o.apiKeyInQuery = true;
  o.transport = capture;
  GeminiClient client(o);
  ChatRequest request;
  request.messages = {Message::user("hi")};
  EXPECT_EQ(client.generate(request).message.content, "hi");
  EXPECT_EQ(client.generateStream(request, [](const StreamDelta&) { return true; }).message.content,
            "hi");
  EXPECT_EQ(client.listModels().size(), 1u);
  ASSERT_EQ(capture->urls.size(), 3u);
  EXPECT_EQ(capture->urls[0],
            "https://generativelanguage.googleapis.com/v1beta/models/"
            "gemini-3-flash:generateContent?key=AIza%2Bsecret%2F1");
  EXPECT_NE(capture->urls[1].find(":streamGenerateContent?alt=sse&key=AIza%2Bsecret%2F1"),
            std::string::npos);
  EXPECT_NE(capture->urls[2].find("?pageSize=1000&key=AIza%2Bsecret%2F1"), std::string::npos);
  for (const auto& sent : capture->headers) {
    for (const std::string& line : sent)
      EXPECT_EQ(line.find("secret"), std::string::npos) << line;
  }
  // A failure names the URL without the key (nothing listens on port 9 of loopback).
  ClientOptions down = gemini();
  down.baseUrl = "http://127.0.0.1:9/v1beta";
  down.apiKey = "AIza-secret-2";
  down.apiKeyInQuery = true;
  down.maxRetries = 0;
  try {
    GeminiClient(down).generate(request);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("AIza-secret-2"), std::string::npos) << what;
    EXPECT_NE(what.find("key=***"), std::string::npos) << what;
  }
  ClientOptions chat;
  chat.apiKeyInQuery = true;
  EXPECT_THROW(OpenAiClient{chat}, ValidationError);
}

TEST(GeminiProtocol, ErrorsAndCutStreams) {
  GeminiAssembler assembler;
  try {
    assembler.addEvent(
        R"({"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}})");
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_EQ(e.details().apiMessage, "The model is overloaded.");
    EXPECT_EQ(e.details().apiType, "UNAVAILABLE");
  }
  EXPECT_THROW(readStream({kTextStream[0], kTextStream[2]}), ProtocolError);
  EXPECT_THROW(readStream({"[1,2]"}), ProtocolError);
  EXPECT_THROW(
      readStream(
          {R"({"candidates":[{"content":{"parts":[{"functionCall":{"args":{}}}]},"index":0}]})"}),
      ProtocolError);
}

TEST(GeminiProtocol, CapsOnPartsAndKeptPartSize) {
  std::string many = R"({"candidates":[{"content":{"parts":[)";
  for (size_t i = 0; i <= kMaxReplyItems; ++i) {
    many +=
        (i ? "," : "") + std::string(R"({"inlineData":{"mimeType":"image/png","data":"AA=="}})");
  }
  many += R"(]},"finishReason":"STOP","index":0}]})";
  try {
    resultFromGeminiResponse(many);
    FAIL() << "no error";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("parts"), std::string::npos) << e.what();
  }
  // Exactly at the cap is fine.
  std::string atCap = R"({"candidates":[{"content":{"parts":[)";
  for (size_t i = 0; i < kMaxReplyItems; ++i) {
    atCap += (i ? "," : "") + std::string(R"({"text":"a","thoughtSignature":"s"})");
  }
  atCap += R"(]},"finishReason":"STOP","index":0}]})";
  EXPECT_EQ(resultFromGeminiResponse(atCap).message.content.size(), kMaxReplyItems);
  const std::string big =
      R"({"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":")" +
      std::string(kMaxServerToolResultBytes, 'A') + R"("}}]},"finishReason":"STOP","index":0}]})";
  EXPECT_THROW(resultFromGeminiResponse(big), ProtocolError);
}

TEST(GeminiProtocol, KeptPartsTravelToGeminiOnly) {
  EXPECT_TRUE(sendsField(kGeminiParts, gemini()));
  for (Protocol p : {Protocol::OpenAiChat, Protocol::OpenAiResponses, Protocol::Anthropic}) {
    ClientOptions o;
    o.protocol = p;
    EXPECT_FALSE(sendsField(kGeminiParts, o));
  }
  // Gemini gets none of the other providers' fields.
  for (auto key : {kThinkingBlocks, kReasoningItems, kAnthropicContent, kResponseOutput}) {
    EXPECT_FALSE(sendsField(key, gemini())) << key;
  }
}

}  // namespace
}  // namespace parley::detail
