// The client's pieces that need no server: the request body, the retry rules, profiles.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "client/request_body.hpp"
#include "client/retry_policy.hpp"
#include "parley/errors.hpp"
#include "parley/llm.hpp"
#include "parley/openai_client.hpp"
#include "parley/profiles.hpp"

namespace parley {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::vector<Message> sampleMessages() {
  Message assistant = Message::assistant("", {ToolCall{"c1", "get_time", ""}});
  assistant.extra["reasoning_content"] = "why";
  Message parts = Message::user("");
  parts.extra["content"] = json::array({{{"type", "text"}, {"text", "a"}}});
  return {Message::system("be \"terse\"\n\ttab \\ \x01 \xC3\xA9"), Message::user("hi"), assistant,
          Message::tool("c1", "12:00"), parts};
}

TEST(EncodeMessage, SameValueAsToJson) {
  for (EmptyContent empty : {EmptyContent::Null, EmptyContent::EmptyString, EmptyContent::Omit}) {
    MessageJsonOptions options{empty};
    for (const Message& m : sampleMessages()) {
      EXPECT_EQ(json::parse(encodeMessage(m, options)), toJson(m, options))
          << encodeMessage(m, options);
    }
  }
}

TEST(EncodeMessage, InvalidUtf8IsAValidationError) {
  EXPECT_THROW(encodeMessage(Message::user("bad \xC3")), ValidationError);
}

TEST(RequestBody, CarriesEveryParameter) {
  ClientOptions options;
  options.model = "default-model";
  options.defaultParameters = {{"temperature", 0.9}, {"user", "u1"}};
  ChatRequest request;
  request.messages = {Message::user("hi")};
  request.tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  request.toolChoice = "auto";
  request.parallelToolCalls = false;
  request.maxTokens = 100;
  request.temperature = 0.2;
  request.topP = 0.5;
  request.stop = {"END"};
  request.seed = 42;
  request.responseFormat = ResponseFormat::jsonSchema("answer", {{"type", "object"}});
  request.extra = {{"top_p", 0.7}, {"logprobs", true}};
  json body = json::parse(detail::buildRequestBody(request, options, false));
  EXPECT_EQ(body["model"], "default-model");
  EXPECT_EQ(body["messages"], toJson(request.messages));
  EXPECT_EQ(body["tools"], request.tools);
  EXPECT_EQ(body["tool_choice"], "auto");
  EXPECT_EQ(body["parallel_tool_calls"], false);
  EXPECT_EQ(body["max_completion_tokens"], 100);
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_EQ(body["temperature"], 0.2);  // the request beats the profile's default
  EXPECT_EQ(body["user"], "u1");        // the profile's default stays
  EXPECT_EQ(body["top_p"], 0.7);        // extra is merged last
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["stop"], json::array({"END"}));
  EXPECT_EQ(body["seed"], 42);
  EXPECT_EQ(body["response_format"]["type"], "json_schema");
  EXPECT_EQ(body["response_format"]["json_schema"]["name"], "answer");
  EXPECT_EQ(body["response_format"]["json_schema"]["strict"], true);
  EXPECT_FALSE(body.contains("stream"));
}

TEST(RequestBody, StreamingQuirksAndMaxTokensField) {
  ClientOptions options;
  options.model = "m";
  ChatRequest request;
  request.messages = {Message::user("hi")};
  request.maxTokens = 5;
  request.responseFormat = ResponseFormat::jsonObject();
  json body = json::parse(detail::buildRequestBody(request, options, true));
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"], json({{"include_usage", true}}));
  EXPECT_EQ(body["response_format"], json({{"type", "json_object"}}));
  options.includeUsage = false;
  options.maxTokensField = MaxTokensField::MaxTokens;
  body = json::parse(detail::buildRequestBody(request, options, true));
  EXPECT_FALSE(body.contains("stream_options"));
  EXPECT_EQ(body["max_tokens"], 5);
  EXPECT_FALSE(body.contains("max_completion_tokens"));
}

TEST(RequestBody, EmptyToolCallContentFollowsTheEndpoint) {
  ClientOptions options;
  options.model = "m";
  ChatRequest request;
  request.messages = {Message::user("t?"), Message::assistant("", {ToolCall{"c", "f", "{}"}}),
                      Message::tool("c", "x")};
  options.emptyToolCallContent = EmptyContent::EmptyString;
  EXPECT_EQ(
      json::parse(detail::buildRequestBody(request, options, false))["messages"][1]["content"], "");
  options.emptyToolCallContent = EmptyContent::Omit;
  EXPECT_FALSE(
      json::parse(detail::buildRequestBody(request, options, false))["messages"][1].contains(
          "content"));
  options.emptyToolCallContent = EmptyContent::Null;
  EXPECT_TRUE(
      json::parse(detail::buildRequestBody(request, options, false))["messages"][1]["content"]
          .is_null());
}

TEST(RequestBody, EncodedMessagesGoFirst) {
  ClientOptions options;
  options.model = "m";
  ChatRequest request;
  request.encodedMessages = {
      std::make_shared<const std::string>(encodeMessage(Message::system("s"))),
      std::make_shared<const std::string>(encodeMessage(Message::user("u")))};
  request.messages = {Message::user("last")};
  json body = json::parse(detail::buildRequestBody(request, options, false));
  ASSERT_EQ(body["messages"].size(), 3u);
  EXPECT_EQ(body["messages"][0]["content"], "s");
  EXPECT_EQ(body["messages"][2]["content"], "last");
}

TEST(RequestBody, UnsendableRequestsNameTheField) {
  auto field = [](const ChatRequest& request, const ClientOptions& options) {
    try {
      detail::buildRequestBody(request, options, false);
    } catch (const ValidationError& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  ClientOptions options;
  ChatRequest request;
  request.messages = {Message::user("hi")};
  EXPECT_EQ(field(request, options), "request.model");
  options.model = "m";
  EXPECT_EQ(field(ChatRequest{}, options), "request.messages");
  request.extra = {{"messages", json::array()}};
  EXPECT_EQ(field(request, options), "request.extra.messages");
  request.extra = json::array();
  EXPECT_EQ(field(request, options), "request.extra");
}

TEST(RetryPolicy, StatusesAndTheOverrideHeader) {
  for (int status : {408, 409, 429, 500, 502, 503, 504})
    EXPECT_TRUE(detail::shouldRetryStatus(status, ""));
  for (int status : {400, 401, 403, 404, 422})
    EXPECT_FALSE(detail::shouldRetryStatus(status, ""));
  EXPECT_FALSE(detail::shouldRetryStatus(503, "false"));
  EXPECT_TRUE(detail::shouldRetryStatus(400, "true"));
  EXPECT_TRUE(detail::shouldRetryStatus(429, "maybe"));  // unreadable: the status decides
}

TEST(RetryPolicy, ServerDelayInEachFormAndBadValues) {
  const auto now =
      std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  using detail::serverRetryDelay;
  EXPECT_EQ(serverRetryDelay("1500", "", now), milliseconds(1500));
  EXPECT_EQ(serverRetryDelay("12.5", "", now), milliseconds(13));
  EXPECT_EQ(serverRetryDelay("", "2", now), milliseconds(2000));
  EXPECT_EQ(serverRetryDelay("", "0.25", now), milliseconds(250));
  EXPECT_EQ(serverRetryDelay("", "Sun, 06 Nov 1994 08:50:07 GMT", now), milliseconds(30000));
  EXPECT_EQ(serverRetryDelay("", "Sunday, 06-Nov-94 08:49:47 GMT", now), milliseconds(10000));
  EXPECT_EQ(serverRetryDelay("", "Sun Nov  6 08:49:42 1994", now), milliseconds(5000));
  EXPECT_EQ(serverRetryDelay("", "60", now), milliseconds(60000));
  // retry-after-ms wins over Retry-After; an unreadable one is ignored.
  EXPECT_EQ(serverRetryDelay("100", "5", now), milliseconds(100));
  EXPECT_EQ(serverRetryDelay("soon", "5", now), milliseconds(5000));
  // Bad values: the caller falls back to its own backoff.
  EXPECT_FALSE(serverRetryDelay("", "", now));
  EXPECT_FALSE(serverRetryDelay("", "61", now));     // above 60 s
  EXPECT_FALSE(serverRetryDelay("", "-1", now));     // negative
  EXPECT_FALSE(serverRetryDelay("", "later", now));  // neither number nor date
  EXPECT_FALSE(serverRetryDelay("", "Sun, 06 Nov 1994 08:49:00 GMT", now));  // in the past
  EXPECT_FALSE(serverRetryDelay("", "Sun, 06 Nov 1994 09:49:37 GMT", now));  // an hour away
  EXPECT_FALSE(serverRetryDelay("90000", "1", now));  // a readable ms value decides alone
  EXPECT_FALSE(serverRetryDelay("", "1e400", now));
}

TEST(RetryPolicy, DefaultBackoffDoublesWithJitterAndIsCapped) {
  using detail::defaultBackoff;
  EXPECT_EQ(defaultBackoff(0, 0.0), milliseconds(500));
  EXPECT_EQ(defaultBackoff(1, 0.0), milliseconds(1000));
  EXPECT_EQ(defaultBackoff(2, 0.0), milliseconds(2000));
  EXPECT_EQ(defaultBackoff(10, 0.0), milliseconds(8000));
  EXPECT_EQ(defaultBackoff(0, 0.999999), milliseconds(375));  // at most 25 % less
  EXPECT_EQ(defaultBackoff(10, 0.5), milliseconds(7000));
}

TEST(OpenAiClient, RejectsUnusableOptions) {
  ClientOptions bad;
  bad.baseUrl = "127.0.0.1:8080/v1";
  EXPECT_THROW(OpenAiClient{bad}, ValidationError);
  ClientOptions negative;
  negative.maxRetries = -1;
  EXPECT_THROW(OpenAiClient{negative}, ValidationError);
}

// A header line ends at CR or LF: a value with one would add headers of its own (injection).
TEST(OpenAiClient, RejectsHeadersThatWouldInjectOthers) {
  ProfileRegistry registry;
  registry.loadTomlString(
      "[profiles.evil]\nbase_url = \"http://127.0.0.1:1/v1\"\n"
      "headers = { \"X-Team\" = \"a\\r\\nX-Injected: 1\" }\n");
  try {
    OpenAiClient client(registry.get("evil"));
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "options.headers.X-Team");
  }
  ClientOptions badName;
  badName.headers["X-A: b\r\nX-B"] = "c";
  EXPECT_THROW(OpenAiClient{badName}, ValidationError);
  ClientOptions fine;
  fine.headers["X-Team"] = "agents, and more: fine";
  EXPECT_NO_THROW(OpenAiClient{fine});
}

TEST(RedactUrl, UserInfoBecomesStars) {
  EXPECT_EQ(redactUrl("http://user:KEY@host:8080/v1"), "http://***@host:8080/v1");
  EXPECT_EQ(redactUrl("https://KEY@host"), "https://***@host");
  EXPECT_EQ(redactUrl("http://a:b@c@host/v1?x=y@z"), "http://***@host/v1?x=y@z");
  EXPECT_EQ(redactUrl("http://host/v1/a@b"), "http://host/v1/a@b");  // an @ in the path
  EXPECT_EQ(redactUrl("https://api.openai.com/v1"), "https://api.openai.com/v1");
  EXPECT_EQ(redactUrl("user:KEY@host/v1"), "***@host/v1");
}

TEST(RedactUrl, KeysInTheQueryBecomeStars) {
  EXPECT_EQ(redactUrl("https://h/v1beta/models/m:generateContent?key=SECRET"),
            "https://h/v1beta/models/m:generateContent?key=***");
  EXPECT_EQ(redactUrl("https://h/m:streamGenerateContent?alt=sse&key=SECRET#top"),
            "https://h/m:streamGenerateContent?alt=sse&key=***#top");
  EXPECT_EQ(redactUrl("http://u:p@h/x?api_key=A&page=2&access_token=B&token=C&apikey=D"),
            "http://***@h/x?api_key=***&page=2&access_token=***&token=***&apikey=***");
  EXPECT_EQ(redactUrl("https://h/x?monkey=1&key"), "https://h/x?monkey=1&key");
}

TEST(HttpError, InBodyErrorsSayWhatHappened) {
  HttpError::Details details;
  details.apiMessage = "quota exceeded";
  EXPECT_STREQ(HttpError(details).what(),
               "the server sent an error instead of a reply: quota exceeded");
  details.status = 200;
  EXPECT_STREQ(HttpError(details).what(),
               "the server sent an error inside its 200 reply: quota exceeded");
  details.status = 429;
  EXPECT_STREQ(HttpError(details).what(), "HTTP 429: quota exceeded");
}

TEST(OpenAiClient, ApiKeyFromTheNamedEnvironmentVariable) {
  ::setenv("PARLEY_TEST_KEY_FOR_CLIENT", "sk-from-env", 1);
  ClientOptions options;
  options.apiKeyEnv = "PARLEY_TEST_KEY_FOR_CLIENT";
  OpenAiClient client(options);
  EXPECT_EQ(client.options().apiKey, "sk-from-env");
  ::unsetenv("PARLEY_TEST_KEY_FOR_CLIENT");
}

const char* kProfiles = R"(
[profiles.local]
base_url = "http://127.0.0.1:8080/v1"
model = "qwen"
api_key_env = "LOCAL_KEY"
headers = { "X-Team" = "agents" }
connect_timeout_ms = 1500
idle_timeout_ms = 3000
max_retries = 0
max_tokens_field = "max_tokens"
include_usage = false
empty_tool_call_content = "omit"
[profiles.local.parameters]
temperature = 0.2
stop = ["END"]

[profiles.openai]
model = "gpt-4o-mini"
)";

TEST(ProfileRegistry, LoadsTomlProfiles) {
  ProfileRegistry registry;
  registry.loadTomlString(kProfiles);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"local", "openai"}));
  ClientOptions local = registry.get("local");
  EXPECT_EQ(local.baseUrl, "http://127.0.0.1:8080/v1");
  EXPECT_EQ(local.model, "qwen");
  EXPECT_EQ(local.apiKeyEnv, "LOCAL_KEY");
  EXPECT_EQ(local.headers.at("X-Team"), "agents");
  EXPECT_EQ(local.connectTimeout, milliseconds(1500));
  EXPECT_EQ(local.idleTimeout, milliseconds(3000));
  EXPECT_EQ(local.requestTimeout, ClientOptions{}.requestTimeout);
  EXPECT_EQ(local.maxRetries, 0);
  EXPECT_EQ(local.maxTokensField, MaxTokensField::MaxTokens);
  EXPECT_FALSE(local.includeUsage);
  EXPECT_EQ(local.emptyToolCallContent, EmptyContent::Omit);
  EXPECT_EQ(local.defaultParameters, json({{"temperature", 0.2}, {"stop", {"END"}}}));
  ClientOptions openai = registry.get("openai");
  EXPECT_EQ(openai.baseUrl, "https://api.openai.com/v1");
  EXPECT_EQ(openai.maxRetries, 2);
}

TEST(ProfileRegistry, UnknownProfileIsAValidationErrorNamingIt) {
  ProfileRegistry registry;
  registry.add("default", ClientOptions{});
  try {
    registry.get("nope");
    FAIL() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "profileId");
    EXPECT_NE(std::string(e.what()).find("\"nope\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("default"), std::string::npos);
  }
  EXPECT_THROW(registry.client("nope"), ValidationError);
}

TEST(ProfileRegistry, BadFilesNameTheKeyAndAddNothing) {
  auto what = [](const std::string& text) {
    ProfileRegistry registry;
    try {
      registry.loadTomlString(text, "p.toml");
    } catch (const ValidationError& e) {
      EXPECT_TRUE(registry.names().empty());
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(
      what("[profiles.a]\nmodel = \"x\"\n[profiles.b]\nmodle = \"y\"\n").find("profiles.b.modle"),
      std::string::npos);
  EXPECT_NE(what("[profiles.a]\nmax_retries = -1\n").find("max_retries"), std::string::npos);
  EXPECT_NE(what("[profiles.a]\nmax_tokens_field = \"tokens\"\n").find("max_tokens_field"),
            std::string::npos);
  EXPECT_NE(what("[profiles.a]\nbase_url = 3\n").find("base_url"), std::string::npos);
  EXPECT_NE(what("[profiles.a\n").find("p.toml:"), std::string::npos);
  EXPECT_NE(what("[other]\n").find("other"), std::string::npos);
  // Parameters nested deeper than JSON may be (toml++ itself allows 256 levels).
  const std::string deep =
      "[profiles.a]\nparameters = { x = " + std::string(200, '[') + std::string(200, ']') + " }\n";
  EXPECT_NE(what(deep).find("profiles.a.parameters: nested deeper than 128 levels"),
            std::string::npos)
      << what(deep);
}

TEST(ProfileRegistry, LoadsAFileAndSharesOneClientPerProfile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("parley-profiles-" + std::to_string(::getpid()) + ".toml");
  { std::ofstream(path) << kProfiles; }
  auto registry = std::make_shared<ProfileRegistry>();
  registry->loadToml(path.string());
  std::filesystem::remove(path);
  auto a = registry->client("local");
  EXPECT_EQ(a, registry->client("local"));
  EXPECT_NE(a, registry->client("openai"));
  registry->add("local", ClientOptions{});
  EXPECT_NE(a, registry->client("local"));  // replaced: a new client
  EXPECT_THROW(registry->loadToml("/nonexistent/parley.toml"), ValidationError);
}

}  // namespace
}  // namespace parley
