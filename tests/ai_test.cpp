// The AI/Conversation facade against `parley mock`: every example of its specification, shared
// handles, forks, counters, errors, timeouts and concurrent asks.
#include "parley/ai.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "mock/mock_server.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"
#include "parley/store.hpp"
#include "parley/tokens.hpp"

namespace parley {
namespace {

const char* kEchoScript = R"jsonl(
{"match": {"user_contains": "fail"}, "error": {"status": 400, "message": "bad prompt"}}
{"match": {"user_contains": "slow"}, "delay_ms": 30000, "reply": {"content": "too late"}}
{"match": {"user_contains": "unhurried"}, "delay_ms": 500, "reply": {"content": "worth the wait"}}
{"match": {"user_contains": "use a tool"}, "reply": {"tool_calls": [{"name": "get_time", "arguments": {}}]}}
{"reply": {"content": "echo: {{last_user}} (turn {{turn}})", "usage": {"prompt_tokens": 10, "completion_tokens": 4}}}
)jsonl";

class Facade : public ::testing::Test {
 protected:
  void SetUp() override {
    mock::MockOptions options;
    options.script = mock::readScript(kEchoScript);
    server_ = std::make_unique<mock::MockServer>(options);
    server_->start();
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  AI makeAI() { return AI(server_->baseUrl(), "KEY", "model"); }
  nlohmann::json lastBody() { return server_->requests().back()["body"]; }
  // A SQLite store in a folder of this test's own, removed at the end.
  std::shared_ptr<ConversationStore> openTestStore() {
    std::filesystem::create_directories(dir_);
    return openStore((dir_ / "chats.db").string());
  }

  std::unique_ptr<mock::MockServer> server_;
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("parley-facade-" + std::to_string(::getpid()));
};

// Seed: "Conversation(const Conversation &other)": both handles act on one history.
TEST_F(Facade, CopiesShareTheConversation) {
  AI ai = makeAI();
  Conversation original = ai.createConversation();
  Conversation shared(original);
  std::string reply1 = original.ask("Hello!");
  std::string reply2 = shared.ask("What did I just say?");
  EXPECT_EQ(reply1, "echo: Hello! (turn 1)");
  EXPECT_EQ(reply2, "echo: What did I just say? (turn 2)");  // it saw the first turn
  EXPECT_EQ(original.getConversationList(),
            (std::vector<std::string>{"Hello!", reply1, "What did I just say?", reply2}));
  EXPECT_EQ(shared.getTotalTokensUsed(), original.getTotalTokensUsed());
  EXPECT_EQ(lastBody()["messages"].size(), 3u);
}

// Seed: "~Conversation()": a conversation in a scope is released with it.
TEST_F(Facade, ConversationInAScope) {
  {
    AI ai = makeAI();
    Conversation convo = ai.createConversation();
    EXPECT_FALSE(convo.ask("Temporary question").empty());
  }
  SUCCEED();
}

// Seed: "operator=": assignment makes both share one conversation.
TEST_F(Facade, AssignmentShares) {
  AI ai = makeAI();
  Conversation convo1 = ai.createConversation();
  Conversation convo2 = ai.createConversation();
  convo2.ask("only in two");
  convo2 = convo1;
  convo1.ask("Hello");
  EXPECT_EQ(convo2.getConversationList().size(), 2u);
  EXPECT_EQ(convo2.getConversationList()[0], "Hello");
}

// Seed: "ask": reply, isEmpty check, follow-up in the same context.
TEST_F(Facade, AskThenFollowUp) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  std::string reply = convo.ask("Hello, who are you?");
  ASSERT_FALSE(reply.empty());
  std::string followUp = convo.ask("Can you summarize your abilities?");
  EXPECT_EQ(followUp, "echo: Can you summarize your abilities? (turn 2)");
  EXPECT_EQ(convo.getFinishReason(), "stop");
}

// Seed: "getConversationList": even = user, odd = assistant; the last user message.
TEST_F(Facade, ConversationListAlternates) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  convo.ask("Hello!");
  convo.ask("What can you do?");
  std::vector<std::string> history = convo.getConversationList();
  ASSERT_EQ(history.size(), 4u);
  EXPECT_EQ(history[0], "Hello!");
  EXPECT_EQ(history[2], "What can you do?");
  EXPECT_EQ(history[3], "echo: What can you do? (turn 2)");
  history.push_back("changed");  // a copy: the conversation does not change
  EXPECT_EQ(convo.getConversationList().size(), 4u);
}

// Seed: "setConversationList": a scripted history, then a new question.
TEST_F(Facade, ScriptedHistoryThenAsk) {
  AI ai = makeAI();
  ai.setSystemPrompt("Be brief.");
  Conversation convo = ai.createConversation();
  convo.ask("to be replaced");
  std::vector<std::string> scripted = {"User: Please always answer very briefly.",
                                       "Assistant: Understood. I will answer briefly.",
                                       "User: What is 2+2?"};
  ASSERT_TRUE(convo.setConversationList(scripted));
  EXPECT_EQ(convo.getConversationList(), scripted);
  EXPECT_EQ(convo.getTotalTokensUsed(), 0) << "counters reset";
  std::string reply = convo.ask("And what is 3+3?");
  EXPECT_EQ(reply, "echo: And what is 3+3? (turn 3)");
  const auto messages = lastBody()["messages"];
  ASSERT_EQ(messages.size(), 5u);
  EXPECT_EQ(messages[0]["content"], "Be brief.");
  EXPECT_EQ(messages[2]["role"], "assistant");
  // The scripted prompt that got no reply is marked with "" to keep the parity.
  EXPECT_EQ(convo.getConversationList(),
            (std::vector<std::string>{scripted[0], scripted[1], scripted[2], "", "And what is 3+3?",
                                      reply}));
}

TEST_F(Facade, ListItCannotTakeIsRefused) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  convo.ask("keep me");
  EXPECT_FALSE(convo.setConversationList({"fine", "ok", ""}));
  EXPECT_EQ(convo.getConversationList().size(), 2u);
  EXPECT_TRUE(convo.setConversationList({}));
  EXPECT_TRUE(convo.getConversationList().empty());
}

// Seed: "duplicate": two branches from one base evolve alone.
TEST_F(Facade, ForksEvolveAlone) {
  AI ai = makeAI();
  Conversation base = ai.createConversation();
  base.ask("Explain recursion in simple terms.");
  Conversation branch1 = base.duplicate();
  Conversation branch2 = base.duplicate();
  std::string reply1 = branch1.ask("Give me a very short example.");
  std::string reply2 = branch2.ask("Give me a detailed, step-by-step example.");
  EXPECT_EQ(reply1, "echo: Give me a very short example. (turn 2)");
  EXPECT_EQ(reply2, "echo: Give me a detailed, step-by-step example. (turn 2)");
  EXPECT_EQ(base.getConversationList().size(), 2u);
  EXPECT_EQ(branch1.getConversationList().size(), 4u);
  EXPECT_EQ(branch2.getConversationList()[2], "Give me a detailed, step-by-step example.");
  EXPECT_EQ(base.getTotalTokensUsed(), 14);
  EXPECT_EQ(branch1.getTotalTokensUsed(), 28);  // the fork started with the base's counters
}

// Seed: "getAI": changing the AI through the conversation affects its next ask.
TEST_F(Facade, GetAISharesConfiguration) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  AI associated = convo.getAI();
  associated.setJsonMode(true).setMaxTokens(50).setTemperature(0.5).setModel("other-model");
  EXPECT_TRUE(ai.getJsonMode());
  convo.ask("Respond with JSON describing a cat.");
  const auto body = lastBody();
  EXPECT_EQ(body["response_format"]["type"], "json_object");
  EXPECT_EQ(body["model"], "other-model");
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["max_completion_tokens"], 50);
}

// Every setting changed on an AI after createConversation() reaches the conversations that
// share it at their next ask, the system prompt included, whether set on the AI or through
// convo.getAI(); a failed ask leaves the history as it was.
TEST_F(Facade, SettingsChangedAfterCreationReachEveryConversation) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  Conversation other = ai.createConversation();
  convo.ask("Hello");
  EXPECT_EQ(lastBody()["messages"][0]["role"], "user");

  ai.setSystemPrompt("Answer in French.");
  convo.ask("Bonjour?");
  auto messages = lastBody()["messages"];
  ASSERT_EQ(messages.size(), 4u) << messages.dump();
  EXPECT_EQ(messages[0], (nlohmann::json{{"role", "system"}, {"content", "Answer in French."}}));
  EXPECT_EQ(messages[1]["content"], "Hello");  // the history is kept after the new prompt
  other.ask("Salut");
  EXPECT_EQ(lastBody()["messages"][0]["content"], "Answer in French.");

  // Through getAI(), with the other settings; a fork shares the AI too.
  convo.getAI().setSystemPrompt("Answer in German.").setMaxTokens(20).setModel("m2");
  Conversation fork = convo.duplicate();
  fork.ask("Hallo?");
  messages = lastBody()["messages"];
  EXPECT_EQ(messages[0]["content"], "Answer in German.");
  EXPECT_EQ(messages.size(), 6u) << "one system message, replaced, not added";
  EXPECT_EQ(lastBody()["model"], "m2");
  EXPECT_EQ(lastBody()["max_completion_tokens"], 20);
  other.ask("Noch da?");
  EXPECT_EQ(lastBody()["messages"][0]["content"], "Answer in German.");

  // A failed ask changes nothing; the next one still sends the new prompt.
  const auto before = convo.getConversationList();
  EXPECT_EQ(convo.ask("please fail"), "");
  EXPECT_EQ(convo.getConversationList(), before);
  convo.ask("Und jetzt?");
  EXPECT_EQ(lastBody()["messages"][0]["content"], "Answer in German.");
  EXPECT_EQ(lastBody()["messages"].size(), 6u);

  // No system prompt any more: none is sent.
  ai.setSystemPrompt("");
  convo.ask("Plain again");
  EXPECT_EQ(lastBody()["messages"][0]["role"], "user");
  EXPECT_EQ(convo.getConversationList().size(), 8u);
}

// A stored conversation saves the new system prompt with the turn that first sent it.
TEST_F(Facade, ASystemPromptChangedLaterIsSavedWithTheStoredThread) {
  std::shared_ptr<ConversationStore> store = openTestStore();
  {
    AI ai = makeAI();
    Conversation convo = ai.createConversation(store, "prompted");
    convo.ask("Hello");
    ai.setSystemPrompt("Answer in French.");
    convo.ask("Bonjour?");
    EXPECT_EQ(convo.lastError(), "");
  }
  AI again = makeAI();  // no system prompt of its own: the stored one stays
  Conversation resumed = again.createConversation(store, "prompted");
  resumed.ask("Encore?");
  const auto messages = lastBody()["messages"];
  ASSERT_EQ(messages.size(), 6u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "Answer in French.");
}

// Points the vocabulary search at `dir` for one scope.
class ScopedDataDir {
 public:
  explicit ScopedDataDir(const std::filesystem::path& dir) {
    if (const char* previous = std::getenv("PARLEY_DATA_DIR")) previous_ = previous;
    ::setenv("PARLEY_DATA_DIR", dir.c_str(), 1);
  }
  ~ScopedDataDir() {
    if (previous_) {
      ::setenv("PARLEY_DATA_DIR", previous_->c_str(), 1);
    } else {
      ::unsetenv("PARLEY_DATA_DIR");
    }
  }
  ScopedDataDir(const ScopedDataDir&) = delete;
  ScopedDataDir& operator=(const ScopedDataDir&) = delete;

 private:
  std::optional<std::string> previous_;
};

// A malformed vocabulary file does not stop a conversation: its token counts fall back to the
// estimate; loadEncoding(), which asks for the vocabulary explicitly, still names the problem.
TEST_F(Facade, AMalformedVocabularyFallsBackToTheEstimate) {
  const std::filesystem::path data = dir_ / "bad-vocab";
  std::filesystem::create_directories(data);
  std::ofstream(data / "o200k_base.tiktoken") << "this is not a rank file\n";
  const ScopedDataDir scoped(data);
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  EXPECT_EQ(convo.lastError(), "");
  EXPECT_EQ(convo.ask("Hello"), "echo: Hello (turn 1)");
  EXPECT_EQ(convo.ask("Again"), "echo: Again (turn 2)");
  EXPECT_FALSE(TokenCounter().exact());
  EXPECT_EQ(TokenCounter().count("abcde"), (TokenCount{2, true}));
  try {
    loadEncoding("o200k_base");
    ADD_FAILURE() << "expected an Error for the malformed file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("o200k_base.tiktoken"), std::string::npos) << e.what();
  }
}

// Seed: the three counters.
TEST_F(Facade, CountersAddUp) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  convo.ask("Hello!");
  convo.ask("Tell me a story.");
  convo.ask("Give me three bullet points.");
  EXPECT_EQ(convo.getPromptTokensUsed(), 30);
  EXPECT_EQ(convo.getResponseTokensUsed(), 12);
  EXPECT_EQ(convo.getTotalTokensUsed(),
            convo.getPromptTokensUsed() + convo.getResponseTokensUsed());
  EXPECT_EQ(ai.getTotalTokensUsed(), 42);  // the AI counts its conversations' calls too
  ai.ask("stateless");
  EXPECT_EQ(ai.getTotalTokensUsed(), 56);
  ai.resetTokenTracking();
  EXPECT_EQ(ai.getTotalTokensUsed(), 0);
  EXPECT_EQ(convo.getTotalTokensUsed(), 42);
}

TEST_F(Facade, StatelessAskSendsSystemPromptAndPrompt) {
  AI ai = makeAI();
  ai.setSystemPrompt("You are terse.");
  EXPECT_EQ(ai.ask("Hi"), "echo: Hi (turn 1)");
  EXPECT_EQ(lastBody()["messages"].size(), 2u);
  EXPECT_EQ(ai.ask("Again"), "echo: Again (turn 1)");  // no history
  EXPECT_EQ(ai.getFinishReason(), "stop");
}

TEST_F(Facade, ErrorsGiveEmptyReplyUnchangedHistoryAndAReason) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  convo.ask("Hello");
  const auto before = convo.getConversationList();
  EXPECT_EQ(convo.ask("please fail"), "");
  EXPECT_EQ(convo.getConversationList(), before);
  EXPECT_NE(convo.lastError().find("400"), std::string::npos) << convo.lastError();
  EXPECT_NE(convo.lastError().find("bad prompt"), std::string::npos) << convo.lastError();
  EXPECT_EQ(ai.lastError(), convo.lastError());

  AI nowhere("http://127.0.0.1:1", "KEY", "model");  // nothing listens on port 1
  EXPECT_EQ(nowhere.ask("hi"), "");
  EXPECT_FALSE(nowhere.lastError().empty());
  Conversation lost = nowhere.createConversation();
  EXPECT_EQ(lost.ask("hi"), "");
  EXPECT_TRUE(lost.getConversationList().empty());
}

// The facade runs no tools. A reply that only asks for tools cannot be completed: "" with a
// reason, and nothing of the turn is kept, in memory or in the store.
TEST_F(Facade, AReplyAskingForToolsIsAFailureThatKeepsNothing) {
  AI ai = makeAI();
  auto store = openTestStore();
  Conversation convo = ai.createConversation(store, "t");
  ASSERT_NE(convo.ask("Hello"), "");
  const auto before = convo.getConversationList();
  EXPECT_EQ(convo.ask("please use a tool"), "");
  EXPECT_NE(convo.lastError().find("get_time"), std::string::npos) << convo.lastError();
  EXPECT_EQ(convo.getConversationList(), before);
  EXPECT_EQ(store->loadThread("t").messages.size(), 2u);  // the first turn only
  EXPECT_NE(convo.ask("Hello again"), "");
  EXPECT_EQ(convo.getConversationList().size(), 4u);
}

// An ask in flight while the list is replaced: its turn is added after the new list, which is
// kept (it used to be overwritten: both managers were at the same revision number).
TEST_F(Facade, AnAskInFlightDoesNotUndoASetConversationList) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  ASSERT_NE(convo.ask("Hello"), "");  // the history's manager and the list's are both at revision 1
  std::thread asking(
      [convo]() mutable { EXPECT_EQ(convo.ask("unhurried question"), "worth the wait"); });
  // The bound only turns a request that never arrives into a failure instead of a hang.
  ASSERT_TRUE(server_->waitForRequests(2, std::chrono::seconds(10)));
  ASSERT_TRUE(convo.setConversationList({"set meanwhile", "kept"}));
  asking.join();
  const auto list = convo.getConversationList();
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[0], "set meanwhile");
  EXPECT_EQ(list[1], "kept");
  EXPECT_EQ(list[2], "unhurried question");
  EXPECT_EQ(list[3], "worth the wait");
}

TEST_F(Facade, TimeoutIsHonoured) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  // The server would answer after 30 s; the ask gives up after 300 ms (a hang would hit the
  // test's own time limit).
  EXPECT_EQ(convo.ask("slow please", 300), "");
  EXPECT_NE(convo.lastError().find("timeout"), std::string::npos) << convo.lastError();
  EXPECT_TRUE(convo.getConversationList().empty());
  EXPECT_EQ(ai.ask("slow again", 300), "");
}

TEST_F(Facade, ConcurrentAsksOnOneHandleKeepTheHistoryWellFormed) {
  AI ai = makeAI();
  Conversation convo = ai.createConversation();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([convo, t]() mutable {
      for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(
            convo.ask("thread " + std::to_string(t) + " ask " + std::to_string(i)).empty());
      }
    });
  }
  for (auto& th : threads)
    th.join();
  auto list = convo.getConversationList();
  ASSERT_EQ(list.size(), 20u);
  for (size_t i = 0; i < list.size(); i += 2) {
    EXPECT_EQ(list[i + 1].rfind("echo: " + list[i] + " (turn ", 0), 0u) << list[i + 1];
  }
  EXPECT_EQ(convo.getTotalTokensUsed(), 10 * 14);
}

TEST_F(Facade, BaseUrlWithoutPathGetsV1) {
  const std::string url = server_->baseUrl();  // http://127.0.0.1:PORT/v1
  const std::string root = url.substr(0, url.size() - 3);
  AI ai(root, "KEY", "model");
  EXPECT_EQ(ai.getBaseUrl(), url);
  EXPECT_EQ(AI(root + "/", "KEY", "m").getBaseUrl(), url);
  EXPECT_EQ(ai.ask("Hi"), "echo: Hi (turn 1)");
  EXPECT_EQ(AI(url + "/", "KEY", "m").getBaseUrl(), url + "/");  // a path is taken as given
}

TEST_F(Facade, EmbeddingsCompareByMeaningOfWords) {
  AI ai = makeAI();
  Embedding cat = ai.createEmbedding("the cat sat on the mat");
  Embedding cat2 = ai.createEmbedding("a cat sat on a mat");
  Embedding stocks = ai.createEmbedding("quarterly earnings beat expectations");
  ASSERT_FALSE(cat.isEmpty()) << ai.lastError();
  EXPECT_EQ(cat.getDimensions(), 256);
  EXPECT_NEAR(cat.compare(cat), 1.0f, 1e-5);
  EXPECT_GT(cat.compare(cat2), cat.compare(stocks));
  EXPECT_EQ(lastBody()["model"], "text-embedding-3-small");
  EXPECT_EQ(Embedding().compare(cat), 0.0f);
  AI nowhere("http://127.0.0.1:1", "KEY", "model");
  EXPECT_TRUE(nowhere.createEmbedding("x").isEmpty());
  EXPECT_FALSE(nowhere.lastError().empty());
}

TEST_F(Facade, AStoreFromOpenStoreGoesStraightIntoAConversation) {
  std::filesystem::create_directories(dir_);
  auto store = openStore((dir_ / "direct.db").string());  // as a user writes it
  AI ai = makeAI();
  Conversation convo = ai.createConversation(store, "direct");
  EXPECT_EQ(convo.lastError(), "");
  EXPECT_NE(convo.ask("Hello"), "");
  EXPECT_EQ(store->threadInfo("direct")->messageCount, 2);
}

// A stored conversation stays stored: a list set on it is saved as the thread's new batch, and
// later asks are saved after it.
TEST_F(Facade, SetConversationListOnAStoredConversationKeepsSaving) {
  std::shared_ptr<ConversationStore> store = openTestStore();
  {
    AI ai = makeAI();
    Conversation convo = ai.createConversation(store, "t");
    ASSERT_NE(convo.ask("Hello"), "");
    ASSERT_TRUE(convo.setConversationList({"set question", "set answer"}));
    ASSERT_NE(convo.ask("after the list"), "");
  }
  AI again = makeAI();
  Conversation resumed = again.createConversation(store, "t");
  const auto list = resumed.getConversationList();
  ASSERT_EQ(list.size(), 4u) << resumed.lastError();
  EXPECT_EQ(list[0], "set question");
  EXPECT_EQ(list[2], "after the list");
}

// Two asks at once on one stored conversation: both turns are in memory and in the thread.
TEST_F(Facade, ConcurrentAsksOnAStoredConversationAreBothSaved) {
  std::shared_ptr<ConversationStore> store = openTestStore();
  {
    AI ai = makeAI();
    Conversation convo = ai.createConversation(store, "t");
    std::thread first([convo]() mutable { EXPECT_NE(convo.ask("unhurried one"), ""); });
    std::thread second([convo]() mutable { EXPECT_NE(convo.ask("unhurried two"), ""); });
    first.join();
    second.join();
    EXPECT_EQ(convo.getConversationList().size(), 4u);
  }
  AI again = makeAI();
  Conversation resumed = again.createConversation(store, "t");
  EXPECT_EQ(resumed.getConversationList().size(), 4u) << resumed.lastError();
}

TEST_F(Facade, PersistedConversationSurvivesTheProcessState) {
  std::shared_ptr<ConversationStore> store = openTestStore();
  {
    AI ai = makeAI();
    Conversation convo = ai.createConversation(store, "support-1");
    EXPECT_EQ(convo.lastError(), "");
    convo.ask("Hello");
    convo.ask("Still there?");
    EXPECT_EQ(convo.ask("please fail"), "");
  }
  AI again = makeAI();
  Conversation resumed = again.createConversation(store, "support-1");
  auto list = resumed.getConversationList();
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[2], "Still there?");
  EXPECT_EQ(resumed.ask("And now?"), "echo: And now? (turn 3)");
}

TEST_F(Facade, DuplicateOfAStoredConversationIsAStoredFork) {
  std::shared_ptr<ConversationStore> store = openTestStore();
  {
    AI ai = makeAI();
    Conversation main = ai.createConversation(store, "main");
    main.ask("Hello");
    Conversation fork = main.duplicate();
    EXPECT_EQ(fork.lastError(), "");
    fork.ask("Only on the fork");
    main.ask("Only on main");
    EXPECT_EQ(main.lastError(), "");  // the fork's save did not take main's thread
  }
  // Each thread holds its own turns; the fork shares main's first turn in the store.
  const auto threads = store->listThreads();
  ASSERT_EQ(threads.size(), 2u);
  const ThreadInfo& forkInfo = threads[0].id == "main" ? threads[1] : threads[0];
  EXPECT_EQ(forkInfo.parentId, "main");
  AI again = makeAI();
  auto mainList = again.createConversation(store, "main").getConversationList();
  ASSERT_EQ(mainList.size(), 4u);
  EXPECT_EQ(mainList[2], "Only on main");
  auto forkList = again.createConversation(store, forkInfo.id).getConversationList();
  ASSERT_EQ(forkList.size(), 4u);
  EXPECT_EQ(forkList[0], "Hello");
  EXPECT_EQ(forkList[2], "Only on the fork");
}

}  // namespace
}  // namespace parley
