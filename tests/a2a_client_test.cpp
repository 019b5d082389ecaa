// parley's A2A client (parley/a2a.hpp) against a loopback agent of the test's own: the card read,
// a task followed to its end, INPUT_REQUIRED asked through ToolContext::ask and answered on the
// same task, and each cap on what the agent sends (card, answer, artifacts, input rounds); a
// signed card verified (or refused: unsigned, another key, changed, past a cap).
#include "parley/a2a.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "http/server.hpp"
#include "model/base64url.hpp"
#include "parley/errors.hpp"
#include "parley/tools.hpp"

namespace parley {
namespace {

using json = nlohmann::json;

// An A2A agent: its card, and a JSON-RPC endpoint answering with what `answer` makes of a request.
class TestAgent {
 public:
  TestAgent() {
    server_.Get("/.well-known/agent-card.json",
                [this](const httplib::Request&, httplib::Response& res) {
                  res.set_content(card.empty() ? defaultCard().dump() : card, "application/json");
                });
    server_.Post("/rpc", [this](const httplib::Request& req, httplib::Response& res) {
      const json request = json::parse(req.body);
      std::function<json(const json&)> answer;
      {
        std::lock_guard lock(mutex);
        requests.push_back(request);
        authorization = req.get_header_value("Authorization");
        answer = answer_;
      }
      const json result = answer(request);
      if (result.is_object() && result.contains("sse")) {
        // A stream: each StreamResponse of "sse" an event; "raw" as it is.
        std::string body = result.value("raw", std::string());
        for (const json& event : result["sse"])
          body += "data: " +
                  json({{"jsonrpc", "2.0"}, {"id", request["id"]}, {"result", event}}).dump() +
                  "\r\n\r\n";
        res.set_content(body, "text/event-stream");
        return;
      }
      res.set_content(json({{"jsonrpc", "2.0"}, {"id", request["id"]}, {"result", result}}).dump(),
                      "application/json");
    });
    port_ = server_.start("127.0.0.1", 0, "test agent");
  }
  // parley's front, not httplib's listen thread: httplib's stop() before its thread listened
  // left the thread listening and the join waiting.
  ~TestAgent() { server_.shutdown(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  json defaultCard() const {
    return {
        {"name", "tester"},
        {"description", "answers"},
        {"supportedInterfaces",
         {{{"url", url() + "/rpc"}, {"protocolBinding", "JSONRPC"}, {"protocolVersion", "1.0"}}}},
        {"skills", {{{"id", "s"}, {"name", "Sums"}, {"description", "adds numbers"}}}}};
  }

  std::string card;  // "" the default card
  // What the agent answers a request with (the server thread reads it under the mutex).
  void answer(std::function<json(const json& request)> f) {
    std::lock_guard lock(mutex);
    answer_ = std::move(f);
  }
  std::mutex mutex;
  std::vector<json> requests;
  std::string authorization;

 private:
  std::function<json(const json& request)> answer_ = [](const json&) { return json::object(); };
  http::Server server_;
  int port_ = 0;
};

json task(const std::string& state, const std::string& text, size_t artifacts = 1) {
  json t = {{"id", "t-1"}, {"contextId", "c-1"}, {"status", {{"state", state}}}};
  if (state == "TASK_STATE_INPUT_REQUIRED") {
    t["status"]["message"] = {{"role", "ROLE_AGENT"}, {"parts", {{{"text", text}}}}};
    return {{"task", t}};
  }
  t["artifacts"] = json::array();
  for (size_t i = 0; i < artifacts; ++i)
    t["artifacts"].push_back({{"artifactId", std::to_string(i)}, {"parts", {{{"text", text}}}}});
  return {{"task", t}};
}

std::string callTool(const std::shared_ptr<ToolRegistry>& tools, const std::string& arguments,
                     ToolAsk ask = {}) {
  ToolExecutorOptions options;
  options.ask = std::move(ask);
  ToolExecutor executor(tools, options);
  const ToolResult result = executor.execute({"call-1", "agent", arguments});
  return result.success ? result.content() : "error: " + result.error;
}

TEST(A2aClient, TheCardGivesTheToolItsDescriptionAndTheAnswerIsTheArtifacts) {
  TestAgent agent;
  agent.answer([](const json& request) {
    return task("TASK_STATE_COMPLETED",
                "you said " + request["params"]["message"]["parts"][0]["text"].get<std::string>());
  });
  A2aAgentOptions options;
  options.url = agent.url();
  options.bearerToken = "secret";
  auto tools = std::make_shared<ToolRegistry>();
  const A2aAgentCard card = addA2aAgent(*tools, "agent", options);
  EXPECT_EQ(card.jsonRpcUrl, agent.url() + "/rpc");
  ASSERT_TRUE(tools->find("agent"));
  EXPECT_NE(tools->find("agent")->description.find("Sums: adds numbers"), std::string::npos);
  EXPECT_EQ(callTool(tools, R"({"message": "hi"})"), "you said hi");
  std::lock_guard lock(agent.mutex);
  EXPECT_EQ(agent.authorization, "Bearer secret");
  EXPECT_EQ(agent.requests.at(0)["method"], "SendMessage");
  EXPECT_EQ(agent.requests.at(0)["params"]["message"]["role"], "ROLE_USER");
}

TEST(A2aClient, InputRequiredIsAskedAndAnsweredOnTheSameTask) {
  TestAgent agent;
  agent.answer([](const json& request) {
    const json& message = request["params"]["message"];
    if (!message.contains("taskId")) return task("TASK_STATE_INPUT_REQUIRED", "Which colour?");
    return task("TASK_STATE_COMPLETED", "painted " +
                                            message["parts"][0]["text"].get<std::string>() +
                                            " on " + message["taskId"].get<std::string>());
  });
  A2aAgentOptions options;
  options.url = agent.url();
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  json asked;
  const std::string result =
      callTool(tools, R"({"message": "paint"})", [&](const ToolContext&, const json& question) {
        asked = question;
        return json("blue");
      });
  EXPECT_EQ(asked["kind"], "a2a_input");
  EXPECT_EQ(asked["message"], "Which colour?");
  EXPECT_EQ(result, "painted blue on t-1");
  // Without anyone to ask, the model gets the question and the task id.
  const std::string handed = callTool(tools, R"({"message": "paint"})");
  EXPECT_NE(handed.find("the agent asks: Which colour?"), std::string::npos);
  EXPECT_NE(handed.find("task_id \"t-1\""), std::string::npos);
}

TEST(A2aClient, AnAgentThatAsksPastTheRoundsCapFails) {
  TestAgent agent;
  agent.answer([](const json&) { return task("TASK_STATE_INPUT_REQUIRED", "again?"); });
  A2aAgentOptions options;
  options.url = agent.url();
  options.maxInputRounds = 2;
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  int asked = 0;
  const std::string result =
      callTool(tools, R"({"message": "x"})", [&](const ToolContext&, const json&) {
        ++asked;
        return json("yes");
      });
  EXPECT_EQ(asked, 2);
  EXPECT_NE(result.find("maxInputRounds"), std::string::npos) << result;
}

TEST(A2aClient, CapsOnTheCardTheAnswerAndTheArtifacts) {
  TestAgent agent;
  A2aAgentOptions options;
  options.url = agent.url();
  options.maxCardBytes = 200;
  json big = agent.defaultCard();
  big["description"] = std::string(300, 'x');
  agent.card = big.dump();
  try {
    fetchA2aAgentCard(options);
    ADD_FAILURE() << "a card past maxCardBytes was read";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than 200 bytes"), std::string::npos);
  }
  agent.card = "";
  options.maxCardBytes = 256 << 10;
  options.maxResponseBytes = 1000;
  options.maxArtifacts = 3;
  options.maxAnswerBytes = 50;
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  agent.answer([](const json&) { return task("TASK_STATE_COMPLETED", std::string(2000, 'y')); });
  EXPECT_NE(callTool(tools, R"({"message": "x"})").find("larger than 1000 bytes"),
            std::string::npos);
  agent.answer([](const json&) { return task("TASK_STATE_COMPLETED", "a", 4); });
  EXPECT_NE(callTool(tools, R"({"message": "x"})").find("4 artifacts, over 3 (maxArtifacts)"),
            std::string::npos);
  agent.answer([](const json&) { return task("TASK_STATE_COMPLETED", std::string(80, 'z')); });
  EXPECT_NE(callTool(tools, R"({"message": "x"})").find("[cut at 50 bytes]"), std::string::npos);
}

TEST(A2aClient, ACardWithoutAJsonRpcInterfaceOrAFailedTaskSaysSo) {
  TestAgent agent;
  A2aAgentOptions options;
  options.url = agent.url();
  json card = agent.defaultCard();
  card["supportedInterfaces"][0]["protocolVersion"] = "0.3";
  agent.card = card.dump();
  EXPECT_THROW(fetchA2aAgentCard(options), ProtocolError);
  agent.card = "";
  agent.answer([](const json&) {
    json t = task("TASK_STATE_COMPLETED", "");
    t["task"]["status"] = {{"state", "TASK_STATE_FAILED"},
                           {"message", {{"parts", {{{"text", "out of paint"}}}}}}};
    t["task"].erase("artifacts");
    return t;
  });
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  const std::string result = callTool(tools, R"({"message": "x"})");
  EXPECT_NE(result.find("TASK_STATE_FAILED: out of paint"), std::string::npos) << result;
  options.url = "ftp://example.com";
  EXPECT_THROW(fetchA2aAgentCard(options), ValidationError);
}

// A call notes its task as soon as the agent made it (SendMessage answered at once, the task
// still working), then follows it; a call run again with that handle (a durable run taken over)
// follows the same task and sends nothing new; a handle of another agent is refused.
TEST(A2aClient, ACallCheckpointsItsTaskAndAResumedCallFollowsIt) {
  TestAgent agent;
  agent.answer([](const json& request) {
    if (request["method"] == "SendMessage") return task("TASK_STATE_WORKING", "", 0);
    // GetTask answers with the task itself.
    return task("TASK_STATE_COMPLETED", "finished " + request["params"]["id"].get<std::string>())
        .at("task");
  });
  A2aAgentOptions options;
  options.url = agent.url();
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  std::vector<json> noted;
  ToolExecutorOptions fresh;
  fresh.checkpoint = [&](const ToolContext&, const json& handle) { noted.push_back(handle); };
  EXPECT_EQ(ToolExecutor(tools, fresh).execute({"c", "agent", R"({"message": "go"})"}).content(),
            "finished t-1");
  ASSERT_EQ(noted.size(), 1u);
  EXPECT_EQ(noted[0],
            json({{"agent", "agent"}, {"task", "t-1"}, {"context", "c-1"}, {"round", 0}}));
  {
    std::lock_guard lock(agent.mutex);
    EXPECT_EQ(agent.requests.at(0)["params"]["configuration"]["returnImmediately"], true);
    agent.requests.clear();
  }

  ToolExecutorOptions resumed;
  resumed.resumeFrom = [&](const std::string&) { return noted[0]; };
  EXPECT_EQ(ToolExecutor(tools, resumed).execute({"c", "agent", R"({"message": "go"})"}).content(),
            "finished t-1");
  {
    std::lock_guard lock(agent.mutex);
    ASSERT_EQ(agent.requests.size(), 1u);
    EXPECT_EQ(agent.requests[0]["method"], "GetTask");  // no second SendMessage
  }

  resumed.resumeFrom = [](const std::string&) { return json{{"agent", "other"}, {"task", "t-9"}}; };
  const ToolResult other =
      ToolExecutor(tools, resumed).execute({"c", "agent", R"({"message": "go"})"});
  EXPECT_FALSE(other.success);
  EXPECT_NE(other.error.find("started on the A2A agent 'other'"), std::string::npos) << other.error;
}

json statusUpdate(const std::string& state, const std::string& text = "") {
  json status = {{"state", state}};
  if (!text.empty()) status["message"] = {{"role", "ROLE_AGENT"}, {"parts", {{{"text", text}}}}};
  return {{"statusUpdate", {{"taskId", "t-1"}, {"contextId", "c-1"}, {"status", status}}}};
}

json artifactChunk(const std::string& text, bool append, bool last) {
  return {{"artifactUpdate",
           {{"taskId", "t-1"},
            {"contextId", "c-1"},
            {"artifact", {{"artifactId", "a"}, {"parts", {{{"text", text}}}}}},
            {"append", append},
            {"lastChunk", last}}}};
}

// An agent whose card says it streams: the task is followed over SendStreamingMessage (no GetTask),
// noted as soon as the stream names it, its status messages and artifact chunks reported as
// progress, the chunks appended into one answer; a resumed call subscribes to the same task.
TEST(A2aClient, AStreamingAgentsTaskIsFollowedOverItsStream) {
  TestAgent agent;
  json card = agent.defaultCard();
  card["capabilities"] = {{"streaming", true}};
  agent.card = card.dump();
  agent.answer([](const json& request) -> json {
    if (request["method"] == "SendStreamingMessage") {
      return {{"sse",
               {json{{"task", task("TASK_STATE_WORKING", "", 0)["task"]}},
                statusUpdate("TASK_STATE_WORKING", "thinking"), artifactChunk("Hel", false, false),
                artifactChunk("lo", true, true), statusUpdate("TASK_STATE_COMPLETED")}}};
    }
    if (request["method"] == "GetTask") return task("TASK_STATE_WORKING", "", 0)["task"];
    return {{"sse",
             {statusUpdate("TASK_STATE_WORKING", "picked up"), artifactChunk("again", false, true),
              statusUpdate("TASK_STATE_COMPLETED")}}};  // SubscribeToTask
  });
  A2aAgentOptions options;
  options.url = agent.url();
  const A2aAgentCard read = fetchA2aAgentCard(options);
  EXPECT_TRUE(read.streaming);
  std::vector<std::string> progress;
  std::vector<std::string> started;
  A2aFollow follow;
  follow.started = [&](const A2aTaskResult& task) { started.push_back(task.taskId); };
  follow.progress = [&](const std::string& text, const json&) { progress.push_back(text); };
  const A2aTaskResult done = sendA2aMessage(read, options, "go", "", "", follow);
  EXPECT_EQ(done.state, "TASK_STATE_COMPLETED");
  EXPECT_EQ(done.text, "Hello");
  EXPECT_EQ(started, std::vector<std::string>{"t-1"});
  EXPECT_EQ(progress, (std::vector<std::string>{"thinking", "Hel", "lo", ""}));
  {
    std::lock_guard lock(agent.mutex);
    ASSERT_EQ(agent.requests.size(), 1u);  // the stream only
    EXPECT_EQ(agent.requests[0]["method"], "SendStreamingMessage");
    agent.requests.clear();
  }
  progress.clear();
  const A2aTaskResult resumed = followA2aTask(read, options, "t-1", follow);
  EXPECT_EQ(resumed.text, "again");
  EXPECT_EQ(progress, (std::vector<std::string>{"picked up", "again", ""}));
  std::lock_guard lock(agent.mutex);
  ASSERT_EQ(agent.requests.size(), 2u);
  EXPECT_EQ(agent.requests[0]["method"], "GetTask");
  EXPECT_EQ(agent.requests[1]["method"], "SubscribeToTask");
  EXPECT_EQ(agent.requests[1]["params"]["id"], "t-1");
}

// A stream past its caps (events, one event's size) is the call's error naming the cap.
TEST(A2aClient, AStreamPastItsCapsFails) {
  TestAgent agent;
  json card = agent.defaultCard();
  card["capabilities"] = {{"streaming", true}};
  agent.card = card.dump();
  A2aAgentOptions options;
  options.url = agent.url();
  options.maxStreamEvents = 3;
  options.maxStreamEventBytes = 400;
  auto tools = std::make_shared<ToolRegistry>();
  addA2aAgent(*tools, "agent", options);
  agent.answer([](const json&) -> json {
    json events = json::array();
    for (int i = 0; i < 5; ++i)
      events.push_back(statusUpdate("TASK_STATE_WORKING", "step"));
    return {{"sse", events}};
  });
  std::string result = callTool(tools, R"({"message": "x"})");
  EXPECT_NE(result.find("more than 3 events (maxStreamEvents)"), std::string::npos) << result;
  agent.answer([](const json&) -> json {
    return {{"sse", {statusUpdate("TASK_STATE_WORKING", std::string(500, 'x'))}}};
  });
  result = callTool(tools, R"({"message": "x"})");
  EXPECT_NE(result.find("larger than 400 bytes (maxStreamEventBytes)"), std::string::npos)
      << result;
}

// --- Signed Agent Cards ------------------------------------------------------------------------

// A new key as PEM: "P-256", "P-384" or "RSA" (2048 bits); `publicHalf`: its public key.
struct TestKey {
  std::string privatePem;
  std::string publicPem;
};
TestKey newKey(const std::string& kind) {
  EVP_PKEY* key = kind == "RSA" ? EVP_RSA_gen(2048) : EVP_EC_gen(kind.c_str());
  EXPECT_NE(key, nullptr);
  auto pem = [&](bool isPrivate) {
    BIO* bio = BIO_new(BIO_s_mem());
    if (isPrivate)
      PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    else
      PEM_write_bio_PUBKEY(bio, key);
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    std::string out(data, static_cast<size_t>(size));
    BIO_free(bio);
    return out;
  };
  TestKey out{pem(true), pem(false)};
  EVP_PKEY_free(key);
  return out;
}

std::string refusal(const json& card, const std::string& publicPem,
                    const A2aCardSignatureLimits& limits = {}) {
  try {
    verifyA2aCardSignature(card, publicPem, limits);
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "(verified)";
}

// What the signature covers: the card without `signatures` and without empty values, canonical.
TEST(A2aCardSignature, ThePayloadLeavesOutSignaturesAndEmptyValues) {
  const json card = {
      {"name", "x"},
      {"description", ""},
      {"skills", json::array()},
      {"capabilities", {{"streaming", false}, {"extensions", json::array()}}},
      {"securityRequirements", {{{"schemes", {{"bearer", {{"list", json::array()}}}}}}}},
      {"provider", nullptr},
      {"version", 1.50},
      {"signatures", {{{"protected", "a"}, {"signature", "b"}}}}};
  EXPECT_EQ(a2aCardSigningPayload(card),
            R"({"capabilities":{"streaming":false},"name":"x","version":1.5})");
}

// Signed by the service's key (ES256, and RS256), verified by the client's; the kid is the key's
// RFC 7638 thumbprint unless one is given.
TEST(A2aCardSignature, ASignedCardVerifiesWithItsKey) {
  const json card = {
      {"name", "parley"}, {"description", "d\u00e9j\u00e0 \U0001F600"}, {"version", "1.0.0"}};
  for (const std::string kind : {"P-256", "RSA"}) {
    const TestKey key = newKey(kind);
    const A2aCardSigner signer(key.privatePem);
    EXPECT_EQ(signer.algorithm(), kind == "RSA" ? "RS256" : "ES256");
    EXPECT_EQ(signer.keyId(), a2aKeyThumbprint(key.publicPem));
    EXPECT_EQ(a2aKeyThumbprint(key.privatePem), a2aKeyThumbprint(key.publicPem));
    const json signedCard = signer.sign(card);
    ASSERT_EQ(signedCard["signatures"].size(), 1u);
    const json header = json::parse(
        *detail::base64UrlDecode(signedCard["signatures"][0]["protected"].get<std::string>()));
    EXPECT_EQ(header,
              json({{"alg", signer.algorithm()}, {"kid", signer.keyId()}, {"typ", "JOSE"}}));
    EXPECT_EQ(verifyA2aCardSignature(signedCard, key.publicPem), signer.keyId());
    // Signing again replaces the signature; member order and whitespace do not matter.
    const json again = json::parse(signer.sign(signedCard).dump(2));
    EXPECT_EQ(again["signatures"].size(), 1u);
    EXPECT_EQ(verifyA2aCardSignature(again, key.publicPem), signer.keyId());
  }
  const TestKey key = newKey("P-256");
  const A2aCardSigner named(key.privatePem, "key-1", "https://example.com/jwks.json");
  const json header = json::parse(
      *detail::base64UrlDecode(named.sign(card)["signatures"][0]["protected"].get<std::string>()));
  EXPECT_EQ(header["kid"], "key-1");
  EXPECT_EQ(header["jku"], "https://example.com/jwks.json");
  EXPECT_EQ(verifyA2aCardSignature(named.sign(card), key.publicPem), "key-1");
}

TEST(A2aCardSignature, AnUnsignedAlteredOrForeignCardIsRefusedSayingWhy) {
  const TestKey mine = newKey("P-256");
  const TestKey other = newKey("P-256");
  const json card = {{"name", "parley"}, {"description", "answers"}};
  EXPECT_NE(refusal(card, mine.publicPem).find("not signed"), std::string::npos);
  json empty = card;
  empty["signatures"] = json::array();
  EXPECT_NE(refusal(empty, mine.publicPem).find("not signed"), std::string::npos);

  const json foreign = A2aCardSigner(other.privatePem).sign(card);
  EXPECT_NE(refusal(foreign, mine.publicPem).find("signed by another key"), std::string::npos)
      << refusal(foreign, mine.publicPem);

  json altered = A2aCardSigner(mine.privatePem).sign(card);
  altered["description"] = "answers, and sends your data elsewhere";
  EXPECT_NE(refusal(altered, mine.publicPem).find("the card was changed after it was signed"),
            std::string::npos)
      << refusal(altered, mine.publicPem);
  json added = A2aCardSigner(mine.privatePem).sign(card);
  added["supportedInterfaces"] = {{{"url", "https://evil.example/rpc"}}};
  EXPECT_NE(refusal(added, mine.publicPem).find("changed after it was signed"), std::string::npos);

  // An RSA signature for an EC key; a header with `crit`; a mangled entry.
  const json rsa = A2aCardSigner(newKey("RSA").privatePem).sign(card);
  EXPECT_NE(refusal(rsa, mine.publicPem).find("is RS256"), std::string::npos);
  json crit = A2aCardSigner(mine.privatePem).sign(card);
  json header =
      json::parse(*detail::base64UrlDecode(crit["signatures"][0]["protected"].get<std::string>()));
  header["crit"] = {"b64"};
  crit["signatures"][0]["protected"] = detail::base64UrlEncode(header.dump());
  EXPECT_NE(refusal(crit, mine.publicPem).find("crit"), std::string::npos);
  json mangled = card;
  mangled["signatures"] = {{{"protected", 5}}};
  EXPECT_NE(refusal(mangled, mine.publicPem).find("no `protected` and `signature` strings"),
            std::string::npos);
  // One good signature among others is enough (key rotation).
  json rotated = A2aCardSigner(other.privatePem).sign(card);
  rotated["signatures"].push_back(A2aCardSigner(mine.privatePem).sign(card)["signatures"][0]);
  EXPECT_NO_THROW(verifyA2aCardSignature(rotated, mine.publicPem));

  // Keys that are not EC P-256 or RSA >= 2048, or not keys.
  EXPECT_THROW(A2aCardSigner(newKey("P-384").privatePem), ValidationError);
  EXPECT_THROW(A2aCardSigner(mine.publicPem), ValidationError);
  EXPECT_THROW(verifyA2aCardSignature(foreign, "not a key"), ValidationError);
}

TEST(A2aCardSignature, CapsOnTheSignaturesArePassedSayingWhich) {
  const TestKey key = newKey("P-256");
  const json card = A2aCardSigner(key.privatePem).sign({{"name", "parley"}});
  A2aCardSignatureLimits limits;
  json many = card;
  for (int i = 0; i < 8; ++i)
    many["signatures"].push_back(card["signatures"][0]);
  EXPECT_NE(refusal(many, key.publicPem, limits)
                .find("9 signatures, over 8 (A2aCardSignatureLimits::maxSignatures)"),
            std::string::npos);
  limits.maxSignatures = 9;
  EXPECT_EQ(refusal(many, key.publicPem, limits), "(verified)");

  json bigHeader = card;
  bigHeader["signatures"][0]["protected"] = std::string(4097, 'e');
  EXPECT_NE(refusal(bigHeader, key.publicPem).find("maxProtectedHeaderBytes"), std::string::npos);
  json bigSignature = card;
  bigSignature["signatures"][0]["signature"] = std::string(2049, 'A');
  EXPECT_NE(refusal(bigSignature, key.publicPem).find("maxSignatureBytes"), std::string::npos);
}

// The client with cardPublicKey: a card signed by that key is used, any other refused before
// its tool exists.
TEST(A2aClient, ACardThatMustBeSignedIsVerifiedBeforeUse) {
  TestAgent agent;
  const TestKey key = newKey("P-256");
  const A2aCardSigner signer(key.privatePem);
  agent.card = signer.sign(agent.defaultCard()).dump();
  A2aAgentOptions options;
  options.url = agent.url();
  options.cardPublicKey = key.publicPem;
  const A2aAgentCard card = fetchA2aAgentCard(options);
  EXPECT_EQ(card.signedBy, signer.keyId());
  EXPECT_EQ(card.jsonRpcUrl, agent.url() + "/rpc");

  json altered = signer.sign(agent.defaultCard());
  altered["supportedInterfaces"][0]["url"] = "http://127.0.0.1:1/rpc";
  agent.card = altered.dump();
  auto tools = std::make_shared<ToolRegistry>();
  try {
    addA2aAgent(*tools, "agent", options);
    ADD_FAILURE() << "an altered card was used";
  } catch (const ProtocolError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the Agent Card at " + agent.url()), std::string::npos) << what;
    EXPECT_NE(what.find("changed after it was signed"), std::string::npos) << what;
  }
  EXPECT_FALSE(tools->find("agent"));
  agent.card = "";  // unsigned
  EXPECT_THROW(fetchA2aAgentCard(options), ProtocolError);
  options.cardPublicKey.clear();  // no key: an unsigned card is fine
  EXPECT_TRUE(fetchA2aAgentCard(options).signedBy.empty());
}

}  // namespace
}  // namespace parley
