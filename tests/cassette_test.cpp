// Cassettes (docs/cassettes.md): a tool loop recorded against the mock in each protocol replays
// with the mock stopped to the same answer and the same stored thread; six kinds of edit to the
// request each give a miss that names the field; secrets stay out of the files; the caps hold.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/cassette.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"
#include "parley/tools.hpp"
#include "png_fixture.hpp"

namespace parley {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kTwoCalls = R"(
{"match": {"request": 1}, "reply": {"content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "chunk_size": 3}}
{"match": {"request": 2}, "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}}
{"reply": {"content": "Both: {{tool_results}}"}}
)";

const char* kSecretKey = "sk-cassette-secret-0123456789";

fs::path freshDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("parley-cassette-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  return dir;
}

std::string readAll(const fs::path& dir) {
  std::string all;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream s;
    s << in.rdbuf();
    all += s.str();
  }
  return all;
}

struct Recorded {
  std::string content;
  std::vector<Message> messages;
};

class CassetteProtocols : public ::testing::TestWithParam<Protocol> {
 protected:
  ClientOptions endpoint(const std::string& baseUrl, CassetteMode mode, const fs::path& dir) {
    ClientOptions o;
    o.protocol = GetParam();
    o.baseUrl = baseUrl;
    o.apiKey = kSecretKey;
    o.model = "mock-model";
    o.maxRetries = 0;
    o.cassettes = CassetteOptions{};
    o.cassettes->directory = dir.string();
    o.cassettes->mode = mode;
    return o;
  }

  Recorded converse(const ClientOptions& client, const std::vector<Message>& prompt) {
    auto tools = std::make_shared<ToolRegistry>();
    tools->add("get_weather", "Weather for a city",
               json::parse(R"({"type":"object","properties":{"city":{"type":"string"}}})"),
               [this](const json& args, ToolContext&) -> json {
                 ++toolRuns_;
                 return args["city"].get<std::string>() + " -3C";
               });
    ConversationOptions o;
    o.llm = makeClient(client);
    o.tools = tools;
    o.systemPrompt = "Be terse.";
    o.stream = true;
    ConversationManager c(o);
    RunResult result = c.run(prompt);
    return {result.content, c.getMessages()};
  }

  int toolRuns_ = 0;
};

TEST_P(CassetteProtocols, RecordedToolLoopReplaysWithTheMockStopped) {
  const fs::path dir = freshDir(std::string(toString(GetParam())) + "-loop");
  const std::vector<Message> prompt = {Message::user("Weather in Oslo and Paris?")};
  Recorded recorded;
  std::string baseUrl;
  {
    mock::MockOptions options;
    options.script = mock::readScript(kTwoCalls);
    mock::MockServer server(options);
    server.start();
    baseUrl = server.baseUrl();
    recorded = converse(endpoint(baseUrl, CassetteMode::Record, dir), prompt);
    EXPECT_EQ(server.requests().size(), 3u);
  }  // the mock stops here: nothing listens at baseUrl any more
  EXPECT_EQ(recorded.content, "Both: Paris -3C");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);
  EXPECT_EQ(readAll(dir).find(kSecretKey), std::string::npos) << "the key was written";

  Recorded replayed = converse(endpoint(baseUrl, CassetteMode::ReplayOnly, dir), prompt);
  EXPECT_EQ(replayed.content, recorded.content);
  EXPECT_EQ(replayed.messages, recorded.messages);
  // The same thread in a store, byte for byte.
  const fs::path db = freshDir(std::string(toString(GetParam())) + "-db");
  fs::create_directories(db);
  {
    auto store = openSqliteStore((db / "t.db").string());
    store->createThread({.id = "recorded"}, recorded.messages);
    store->createThread({.id = "replayed"}, replayed.messages);
    EXPECT_EQ(toJson(store->loadThread("recorded").messages).dump(),
              toJson(store->loadThread("replayed").messages).dump());
  }
  fs::remove_all(db);
  fs::remove_all(dir);
}

// Six edits of a recorded conversation, each replayed without a server: a miss naming the field.
TEST_P(CassetteProtocols, AMissNamesTheFirstDifferingField) {
  const Protocol protocol = GetParam();
  const fs::path dir = freshDir(std::string(toString(protocol)) + "-miss");
  const std::string png1 = test::makePng(3, 2);
  const std::string png2 = test::makePng(2, 3);
  auto request = [&](const std::string& model, const std::string& system, const std::string& old,
                     const std::string& png, double temperature, bool swapTools) {
    ChatRequest r;
    r.model = model;
    r.messages = {Message::system(system), Message::user(old), Message::assistant("Noted."),
                  Message::user({Part::text("And this?"), Part::imageBytes(png)})};
    json a = {{"type", "function"},
              {"function", {{"name", "a"}, {"parameters", {{"type", "object"}}}}}};
    json b = {{"type", "function"},
              {"function", {{"name", "b"}, {"parameters", {{"type", "object"}}}}}};
    r.tools = swapTools ? json::array({b, a}) : json::array({a, b});
    r.temperature = temperature;
    return r;
  };
  std::string baseUrl;
  {
    mock::MockOptions options;
    options.script = mock::readScript(R"({"reply": {"content": "ok"}})");
    mock::MockServer server(options);
    server.start();
    baseUrl = server.baseUrl();
    auto client = makeClient(endpoint(baseUrl, CassetteMode::Record, dir));
    client->generate(request("m1", "Now: 10:00", "Remember 7.", png1, 0.5, false));
  }
  auto client = makeClient(endpoint(baseUrl, CassetteMode::ReplayOnly, dir));
  EXPECT_EQ(client->generate(request("m1", "Now: 10:00", "Remember 7.", png1, 0.5, false))
                .message.content,
            "ok");
  const bool systemApart = protocol != Protocol::OpenAiChat;  // a top-level field elsewhere
  struct Mutation {
    ChatRequest request;
    std::optional<size_t> message;
    std::string field;
  };
  const size_t shift = systemApart ? 1 : 0;  // the system message is not in the array
  const std::vector<Mutation> mutations = {
      {request("m1", "Now: 10:00", "Remember 7.", png1, 0.5, true), std::nullopt, "tools"},
      {request("m1", "Now: 10:01", "Remember 7.", png1, 0.5, false),
       systemApart ? std::nullopt : std::optional<size_t>(0),
       protocol == Protocol::Anthropic         ? "system"
       : protocol == Protocol::OpenAiResponses ? "instructions"
       : protocol == Protocol::Gemini          ? "systemInstruction"
                                               : "content"},
      {request("m1", "Now: 10:00", "Remember 8.", png1, 0.5, false), 1 - shift,
       protocol == Protocol::Gemini ? "parts" : "content"},
      {request("m1", "Now: 10:00", "Remember 7.", png2, 0.5, false), 3 - shift,
       protocol == Protocol::Gemini ? "parts" : "content"},
      {request("m1", "Now: 10:00", "Remember 7.", png1, 0.7, false), std::nullopt,
       protocol == Protocol::Gemini ? "generationConfig" : "temperature"},
      {request("m2", "Now: 10:00", "Remember 7.", png1, 0.5, false), std::nullopt, "model"},
  };
  for (const Mutation& m : mutations) {
    try {
      client->generate(m.request);
      ADD_FAILURE() << "no miss for a change of " << m.field;
    } catch (const CassetteMiss& e) {
      ASSERT_TRUE(e.difference()) << e.what();
      EXPECT_EQ(e.difference()->message, m.message) << e.what();
      EXPECT_EQ(e.difference()->field.substr(0, m.field.size()), m.field) << e.what();
      EXPECT_NE(std::string(e.what()).find(m.field), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, CassetteProtocols,
                         ::testing::Values(Protocol::OpenAiChat, Protocol::OpenAiResponses,
                                           Protocol::Anthropic, Protocol::Gemini),
                         [](const auto& info) {
                           std::string name(toString(info.param));
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// An in-memory transport: answers every request with one small stream, counts the calls.
class CountingTransport : public HttpTransport {
 public:
  explicit CountingTransport(std::string reply) : reply_(std::move(reply)) {}
  void send(const HttpRequest&, HttpReplySink& sink) override {
    ++calls;
    sink.reset();
    sink.onBody(reply_, HttpReplyInfo{200, "req_1"});
  }
  int calls = 0;

 private:
  std::string reply_;
};

const char* kChatReply =
    R"({"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]})";

ClientOptions inMemory(std::shared_ptr<HttpTransport> transport, const fs::path& dir,
                       CassetteMode mode) {
  ClientOptions o;
  o.baseUrl = "http://127.0.0.1:1/v1";
  o.apiKey = kSecretKey;
  o.model = "m";
  o.headers = {{"X-Team-Token", "team-secret-value-42"}, {"User-Agent", "changes/1.0"}};
  o.transport = std::move(transport);
  o.cassettes = CassetteOptions{};
  o.cassettes->directory = dir.string();
  o.cassettes->mode = mode;
  o.cassettes->redactPatterns = {"acct-[0-9]+"};
  return o;
}

TEST(Cassettes, SecretsAndPatternsAreRedactedAndNotKeyed) {
  const fs::path dir = freshDir("secrets");
  auto transport = std::make_shared<CountingTransport>(kChatReply);
  ChatRequest request;
  request.messages = {Message::user("my account is acct-12345")};
  makeClient(inMemory(transport, dir, CassetteMode::Record))->generate(request);
  const std::string written = readAll(dir);
  EXPECT_EQ(written.find(kSecretKey), std::string::npos);
  EXPECT_EQ(written.find("team-secret-value-42"), std::string::npos);
  EXPECT_EQ(written.find("acct-12345"), std::string::npos);
  EXPECT_NE(written.find("[redacted]"), std::string::npos);
  EXPECT_EQ(written.find("changes/1.0"), std::string::npos) << "a volatile header was kept";

  // Another key and another user agent: still the same recording.
  ClientOptions other = inMemory(transport, dir, CassetteMode::ReplayOnly);
  other.apiKey = "sk-another-key-9876543210";
  other.headers["User-Agent"] = "changes/2.0";
  EXPECT_EQ(makeClient(other)->generate(request).message.content, "hi");
  EXPECT_EQ(transport->calls, 1);
  fs::remove_all(dir);
}

TEST(Cassettes, ReplayOrRecordSendsOnlyWhatIsMissing) {
  const fs::path dir = freshDir("either");
  auto transport = std::make_shared<CountingTransport>(kChatReply);
  auto client = makeClient(inMemory(transport, dir, CassetteMode::ReplayOrRecord));
  ChatRequest a;
  a.messages = {Message::user("a")};
  ChatRequest b;
  b.messages = {Message::user("b")};
  client->generate(a);
  client->generate(b);
  EXPECT_EQ(transport->calls, 2);
  auto again = makeClient(inMemory(transport, dir, CassetteMode::ReplayOrRecord));
  again->generate(a);
  again->generate(b);
  EXPECT_EQ(transport->calls, 2);  // both answered from the directory
  fs::remove_all(dir);
}

TEST(Cassettes, AnExchangeOverTheCapIsNeitherWrittenNorRead) {
  const fs::path dir = freshDir("cap");
  auto transport = std::make_shared<CountingTransport>(kChatReply);
  ClientOptions o = inMemory(transport, dir, CassetteMode::Record);
  o.cassettes->maxExchangeBytes = 512;
  ChatRequest request;
  request.messages = {Message::user(std::string(600, 'x'))};
  EXPECT_THROW(makeClient(o)->generate(request), ValidationError);
  EXPECT_TRUE(fs::is_empty(dir));
  // Recorded under a larger cap, then read under the small one: refused.
  o.cassettes->maxExchangeBytes = 1 << 20;
  makeClient(o)->generate(request);
  o.cassettes->maxExchangeBytes = 512;
  o.cassettes->mode = CassetteMode::ReplayOnly;
  try {
    makeClient(o)->generate(request);
    ADD_FAILURE() << "a file over the cap was read";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("over the cap"), std::string::npos) << e.what();
  }
  // A directory of more recordings than maxExchanges is refused when a miss is explained.
  o.cassettes->maxExchangeBytes = 1 << 20;
  o.cassettes->maxExchanges = 1;
  o.cassettes->mode = CassetteMode::Record;
  ChatRequest other;
  other.messages = {Message::user("other")};
  makeClient(o)->generate(other);
  o.cassettes->mode = CassetteMode::ReplayOnly;
  ChatRequest third;
  third.messages = {Message::user("third")};
  try {
    makeClient(o)->generate(third);
    ADD_FAILURE() << "no error";
  } catch (const ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 1 recordings"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// The nearest recording is the one sharing the longest run of leading messages: a conversation
// recorded turn by turn, replayed with its last prompt changed, misses at that message.
TEST(Cassettes, AMissNamesTheMessageAgainstTheRecordingSharingTheLongestPrefix) {
  const fs::path dir = freshDir("nearest");
  auto transport = std::make_shared<CountingTransport>(kChatReply);
  // The first `prompts` prompts of a conversation, each answered "hi"; the last one `last`.
  auto conversation = [](size_t prompts, const std::string& last) {
    ChatRequest r;
    for (size_t i = 1; i <= prompts; ++i) {
      if (i > 1) r.messages.push_back(Message::assistant("hi"));
      r.messages.push_back(Message::user(i == prompts ? last : "u" + std::to_string(i)));
    }
    return r;
  };
  auto recorder = makeClient(inMemory(transport, dir, CassetteMode::Record));
  recorder->generate(conversation(1, "u1"));  // 1 message
  recorder->generate(conversation(2, "u2"));  // 3 messages
  recorder->generate(conversation(3, "u3"));  // 5 messages
  auto replayer = makeClient(inMemory(transport, dir, CassetteMode::ReplayOnly));
  try {
    replayer->generate(conversation(3, "u3 changed"));
    ADD_FAILURE() << "no miss";
  } catch (const CassetteMiss& e) {
    ASSERT_TRUE(e.difference()) << e.what();
    EXPECT_EQ(e.difference()->message, 4u) << e.what();
    EXPECT_EQ(e.difference()->field, "content") << e.what();
    EXPECT_NE(std::string(e.what()).find("message 4 field \"content\""), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A recording edited after it was made no longer says what it answers: refused, naming where its
// request departs from the one sent.
TEST(Cassettes, AnEditedRecordingIsAMissNamingTheField) {
  const fs::path dir = freshDir("edited");
  auto transport = std::make_shared<CountingTransport>(kChatReply);
  ChatRequest request;
  request.messages = {Message::user("first"), Message::assistant("hi"), Message::user("second")};
  makeClient(inMemory(transport, dir, CassetteMode::Record))->generate(request);
  const fs::path file = fs::directory_iterator(dir)->path();
  json exchange = json::parse(std::ifstream(file));
  exchange["request"]["body"]["messages"][2]["content"] = "edited";
  std::ofstream(file) << exchange.dump(2);
  try {
    makeClient(inMemory(transport, dir, CassetteMode::ReplayOnly))->generate(request);
    ADD_FAILURE() << "an edited recording was replayed";
  } catch (const CassetteMiss& e) {
    EXPECT_NE(std::string(e.what()).find("was edited"), std::string::npos) << e.what();
    ASSERT_TRUE(e.difference()) << e.what();
    EXPECT_EQ(e.difference()->message, 2u) << e.what();
    EXPECT_EQ(e.difference()->field, "content") << e.what();
  }
  EXPECT_EQ(transport->calls, 1);
  fs::remove_all(dir);
}

TEST(Cassettes, EnvironmentVariableNamesModeAndDirectory) {
  ::setenv("PARLEY_CASSETTES", "replay-or-record:/tmp/x", 1);
  auto options = cassetteOptionsFromEnv();
  ASSERT_TRUE(options);
  EXPECT_EQ(options->mode, CassetteMode::ReplayOrRecord);
  EXPECT_EQ(options->directory, "/tmp/x");
  ::setenv("PARLEY_CASSETTES", "/tmp/y", 1);
  options = cassetteOptionsFromEnv();
  ASSERT_TRUE(options);
  EXPECT_EQ(options->mode, CassetteMode::ReplayOnly);
  EXPECT_EQ(options->directory, "/tmp/y");
  ::unsetenv("PARLEY_CASSETTES");
  EXPECT_FALSE(cassetteOptionsFromEnv());
}

}  // namespace
}  // namespace parley
