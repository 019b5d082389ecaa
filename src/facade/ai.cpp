#include "parley/ai.hpp"

#include <cmath>
#include <exception>
#include <mutex>
#include <optional>
#include <utility>

#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/turn_defaults.hpp"

namespace parley {

namespace {

// attoboy appends /v1 to a base URL that has no path.
std::string withVersionPath(std::string url) {
  const size_t scheme = url.find("://");
  const size_t pathStart = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (pathStart == std::string::npos) return url + "/v1";
  if (url.size() == pathStart + 1) return url + "v1";
  return url;
}

std::optional<std::chrono::milliseconds> timeoutOf(int timeoutMs) {
  if (timeoutMs <= 0) return std::nullopt;
  return std::chrono::milliseconds(timeoutMs);
}

std::string describe(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return std::string("timeout: ") + e.what();
  return e.what();
}

}  // namespace

struct AI::State {
  mutable std::mutex mutex;
  std::string baseUrl;
  std::string apiKey;
  std::string model;
  std::string systemPrompt;
  std::string embeddingModel = "text-embedding-3-small";
  int maxTokens = -1;
  bool jsonMode = false;
  double temperature = -1;
  std::shared_ptr<LlmClient> llm;
  std::shared_ptr<OpenAiClient> http;  // the same client when it is an OpenAiClient

  int promptTokens = 0;
  int responseTokens = 0;
  std::string finishReason;
  std::string lastError;

  ChatRequest requestTemplate() const {
    std::lock_guard lock(mutex);
    ChatRequest request;
    request.model = model;
    if (maxTokens > 0) request.maxTokens = maxTokens;
    if (temperature >= 0) request.temperature = temperature;
    if (jsonMode) request.responseFormat = ResponseFormat::jsonObject();
    return request;
  }

  void count(const std::optional<TokenUsage>& usage) {
    if (!usage) return;
    std::lock_guard lock(mutex);
    promptTokens += static_cast<int>(usage->promptTokens);
    responseTokens += static_cast<int>(usage->completionTokens);
  }

  void fail(const std::string& error) {
    std::lock_guard lock(mutex);
    lastError = error;
  }
};

struct Conversation::State {
  mutable std::mutex mutex;
  std::shared_ptr<AI::State> ai;
  ConversationManager manager;
  // The thread manager.options().persist saves to, when it is one (duplicate() forks it).
  std::shared_ptr<StoredThread> thread;
  // The AI's system prompt this history was last brought up to: a change on the AI since then
  // is applied to the view at the next ask (AI::setSystemPrompt).
  std::string systemPrompt;
  int promptTokens = 0;
  int responseTokens = 0;
  std::string finishReason;
  std::string lastError;
  // Bumps on every change the facade commits (an ask, setConversationList): an ask compares it,
  // not the revisions of two different managers, to see whether the history moved meanwhile.
  uint64_t version = 0;
};

// --- Embedding ------------------------------------------------------------------------------

Embedding::Embedding(std::vector<float> values) : values_(std::move(values)) {}

float Embedding::compare(const Embedding& other) const {
  if (values_.empty() || values_.size() != other.values_.size()) return 0.0f;
  double dot = 0;
  double a = 0;
  double b = 0;
  for (size_t i = 0; i < values_.size(); ++i) {
    dot += static_cast<double>(values_[i]) * other.values_[i];
    a += static_cast<double>(values_[i]) * values_[i];
    b += static_cast<double>(other.values_[i]) * other.values_[i];
  }
  if (a == 0 || b == 0) return 0.0f;
  return static_cast<float>(dot / (std::sqrt(a) * std::sqrt(b)));
}

// --- AI -------------------------------------------------------------------------------------

AI::AI(const std::string& baseUrl, const std::string& apiKey, const std::string& model)
    : AI(nullptr, baseUrl, apiKey, model) {}

AI::AI(std::shared_ptr<LlmClient> client, const std::string& baseUrl, const std::string& apiKey,
       const std::string& model)
    : state_(std::make_shared<State>()) {
  state_->baseUrl = withVersionPath(baseUrl);
  state_->apiKey = apiKey;
  state_->model = model;
  try {
    ClientOptions options;
    options.baseUrl = state_->baseUrl;
    options.apiKey = apiKey;
    options.model = model;
    state_->http = std::make_shared<OpenAiClient>(options);
  } catch (const std::exception& e) {
    state_->lastError = describe(e);  // every ask reports it
  }
  state_->llm = client ? std::move(client) : state_->http;
}

AI::AI(std::shared_ptr<State> state) : state_(std::move(state)) {}

#define PARLEY_AI_SETTER(name, type, member) \
  AI& AI::name(type value) {                 \
    std::lock_guard lock(state_->mutex);     \
    state_->member = value;                  \
    return *this;                            \
  }
PARLEY_AI_SETTER(setModel, const std::string&, model)
PARLEY_AI_SETTER(setSystemPrompt, const std::string&, systemPrompt)
PARLEY_AI_SETTER(setJsonMode, bool, jsonMode)
PARLEY_AI_SETTER(setEmbeddingModel, const std::string&, embeddingModel)
#undef PARLEY_AI_SETTER

AI& AI::setMaxTokens(int maxTokens) {
  std::lock_guard lock(state_->mutex);
  state_->maxTokens = maxTokens > 0 ? maxTokens : -1;
  return *this;
}

AI& AI::setTemperature(double temperature) {
  std::lock_guard lock(state_->mutex);
  state_->temperature = temperature >= 0 ? temperature : -1;
  return *this;
}

#define PARLEY_AI_GETTER(name, type, member) \
  type AI::name() const {                    \
    std::lock_guard lock(state_->mutex);     \
    return state_->member;                   \
  }
PARLEY_AI_GETTER(getModel, std::string, model)
PARLEY_AI_GETTER(getSystemPrompt, std::string, systemPrompt)
PARLEY_AI_GETTER(getMaxTokens, int, maxTokens)
PARLEY_AI_GETTER(getJsonMode, bool, jsonMode)
PARLEY_AI_GETTER(getTemperature, double, temperature)
PARLEY_AI_GETTER(getBaseUrl, std::string, baseUrl)
PARLEY_AI_GETTER(getEmbeddingModel, std::string, embeddingModel)
PARLEY_AI_GETTER(getPromptTokensUsed, int, promptTokens)
PARLEY_AI_GETTER(getResponseTokensUsed, int, responseTokens)
PARLEY_AI_GETTER(getFinishReason, std::string, finishReason)
PARLEY_AI_GETTER(lastError, std::string, lastError)
#undef PARLEY_AI_GETTER

int AI::getTotalTokensUsed() const {
  std::lock_guard lock(state_->mutex);
  return state_->promptTokens + state_->responseTokens;
}

void AI::resetTokenTracking() {
  std::lock_guard lock(state_->mutex);
  state_->promptTokens = 0;
  state_->responseTokens = 0;
}

std::string AI::ask(const std::string& prompt, int timeoutMs) {
  try {
    if (!state_->llm) throw Error(lastError());
    ChatRequest request = state_->requestTemplate();
    const std::string system = getSystemPrompt();
    if (!system.empty()) request.messages.push_back(Message::system(system));
    request.messages.push_back(Message::user(prompt));
    validate(request.messages.back());
    request.timeout = timeoutOf(timeoutMs);
    ChatResult result = state_->llm->generate(request);
    if (result.message.content.empty()) {
      throw ProtocolError("the model returned no text (finish_reason \"" +
                          result.reportedFinishReason + "\")");
    }
    state_->count(result.usage);
    std::lock_guard lock(state_->mutex);
    state_->finishReason = result.finishReason;
    return result.message.content;
  } catch (const std::exception& e) {
    state_->fail(describe(e));
    return "";
  }
}

Conversation AI::createConversation() {
  auto conversation = std::make_shared<Conversation::State>();
  conversation->ai = state_;
  TurnDefaults turn;
  turn.systemPrompt = getSystemPrompt();
  turn.maxIterations = 1;  // the facade runs no tools: an ask is one model call
  ClientOptions profile;
  {
    std::lock_guard lock(state_->mutex);
    profile.model = state_->model;
  }
  ConversationOptions options = configureConversation(profile, state_->llm, nullptr, turn);
  conversation->systemPrompt = options.systemPrompt;
  conversation->manager = ConversationManager(std::move(options));
  return Conversation(std::move(conversation));
}

Conversation AI::createConversation(std::shared_ptr<ConversationStore> store,
                                    const std::string& threadId) {
  Conversation conversation = createConversation();
  try {
    auto thread = std::make_shared<StoredThread>(std::move(store), threadId);
    ConversationOptions options = conversation.state_->manager.options();
    options.persist = thread;
    ConversationManager persisted(std::move(options));
    thread->attach(persisted);
    conversation.state_->manager = std::move(persisted);
    conversation.state_->thread = std::move(thread);
  } catch (const std::exception& e) {
    conversation.state_->lastError = describe(e);
  }
  return conversation;
}

Embedding AI::createEmbedding(const std::string& text, int timeoutMs) {
  try {
    if (!state_->http) throw Error(lastError());
    auto result = state_->http->createEmbeddings({text}, getEmbeddingModel(), timeoutOf(timeoutMs));
    state_->count(result.usage);
    if (result.embeddings.size() != 1) {
      throw ProtocolError("the server returned " + std::to_string(result.embeddings.size()) +
                          " embeddings for one input");
    }
    return Embedding(std::move(result.embeddings.front()));
  } catch (const std::exception& e) {
    state_->fail(describe(e));
    return Embedding();
  }
}

// --- Conversation -----------------------------------------------------------------------------

Conversation::Conversation(std::shared_ptr<State> state) : state_(std::move(state)) {}

std::string Conversation::ask(const std::string& prompt, int timeoutMs) {
  State& st = *state_;
  try {
    if (!st.ai->llm) throw Error(AI(st.ai).lastError());
    ConversationManager work;
    uint64_t version = 0;
    size_t baseStorage = 0;
    const std::string systemPrompt = AI(st.ai).getSystemPrompt();
    {
      std::lock_guard lock(st.mutex);
      // Unsaved: the turn is saved when it is committed below, into the history it joins (a
      // working copy saved by itself could race another ask's and write a diverged history).
      work = st.manager.clone();
      version = st.version;
      if (systemPrompt != st.systemPrompt) {
        if (auto op = systemPromptOperation(work, systemPrompt)) applyContextOperation(work, *op);
      }
      baseStorage = work.storageSize();
    }
    RunOptions options;
    options.maxIterations = 1;
    options.turnTimeout = timeoutOf(timeoutMs);
    options.request = st.ai->requestTemplate();
    // The facade runs no tools: a reply that asks for some cannot be completed, so it is a
    // failure, and nothing of it is kept (the working copy is dropped, nothing was saved).
    options.runToolCalls = [](const std::vector<ToolCall>& calls,
                              std::stop_token) -> std::vector<ToolResult> {
      std::string names;
      for (const ToolCall& call : calls)
        names += (names.empty() ? "\"" : ", \"") + call.name + "\"";
      throw ProtocolError("the model asked to call " + names +
                          ", and a conversation of the AI facade has no tools to run; the turn "
                          "was not kept");
    };
    RunResult result = work.run(prompt, options);  // no lock held while waiting

    std::lock_guard lock(st.mutex);
    const std::shared_ptr<TurnSink>& persist = st.manager.options().persist;
    ConversationManager next;
    const bool inPlace = st.version == version;
    if (inPlace) {
      next = work.clone(persist);
    } else {
      // The history changed meanwhile (another ask, setConversationList): append this turn.
      next = st.manager.clone(persist);
      std::vector<Message> all = work.getAllMessages();
      next.addMessages(
          std::vector<Message>(all.begin() + static_cast<std::ptrdiff_t>(baseStorage), all.end()));
    }
    if (persist) persist->saveTurn(next);  // throws: nothing committed, the history unchanged
    st.manager = std::move(next);
    if (inPlace) st.systemPrompt = systemPrompt;  // else the next ask brings the view up to it
    ++st.version;
    st.promptTokens += static_cast<int>(result.usage.promptTokens);
    st.responseTokens += static_cast<int>(result.usage.completionTokens);
    st.finishReason = result.finishReason;
    if (result.iterations > 0) st.ai->count(result.usage);
    return result.content;
  } catch (const std::exception& e) {
    const std::string error = describe(e);
    st.ai->fail(error);
    std::lock_guard lock(st.mutex);
    st.lastError = error;
    return "";
  }
}

std::vector<std::string> Conversation::getConversationList() const {
  std::vector<Message> view;
  {
    std::lock_guard lock(state_->mutex);
    view = state_->manager.getMessages();
  }
  std::vector<std::string> list;
  for (const Message& m : view) {
    if (m.role == Role::User) {
      if (list.size() % 2 == 1) list.push_back("");  // the previous prompt got no reply
      list.push_back(m.content);
    } else if (m.role == Role::Assistant && !m.content.empty() && list.size() % 2 == 1) {
      list.push_back(m.content);
    } else if (m.role == Role::Assistant && !m.content.empty() && !list.empty()) {
      list.back() = m.content;  // a later text reply of the same turn is the final one
    }
  }
  return list;
}

bool Conversation::setConversationList(const std::vector<std::string>& list) {
  std::vector<Message> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i % 2 == 0) {
      if (list[i].empty()) return false;
      messages.push_back(Message::user(list[i]));
    } else if (!list[i].empty()) {
      messages.push_back(Message::assistant(list[i]));
    }
  }
  try {
    const std::string system = AI(state_->ai).getSystemPrompt();
    if (!system.empty()) messages.insert(messages.begin(), Message::system(system));
    std::lock_guard lock(state_->mutex);
    // The new list is a new batch of the same history (storage keeps the old messages), so a
    // stored conversation saves it, and goes on saving, into its thread.
    const std::shared_ptr<TurnSink>& persist = state_->manager.options().persist;
    ConversationManager next = state_->manager.clone(persist);
    next.clearMessages(/*keepSystem=*/false);
    next.addMessages(std::move(messages));
    if (persist) persist->saveTurn(next);
    state_->manager = std::move(next);
    state_->systemPrompt = system;
    ++state_->version;
    state_->promptTokens = 0;
    state_->responseTokens = 0;
    state_->finishReason.clear();
    return true;
  } catch (const std::exception& e) {
    std::lock_guard lock(state_->mutex);
    state_->lastError = describe(e);
    return false;
  }
}

Conversation Conversation::duplicate() const {
  auto fork = std::make_shared<State>();
  std::lock_guard lock(state_->mutex);
  fork->ai = state_->ai;
  // A stored conversation forks its thread too, so each saves its own turns.
  if (const auto& parent = state_->thread; parent && state_->manager.options().persist == parent) {
    try {
      fork->thread = parent->fork(state_->manager);
      fork->manager = state_->manager.clone(fork->thread);
    } catch (const std::exception& e) {
      fork->thread = nullptr;
      fork->manager = state_->manager.clone();
      fork->lastError = "the fork is not saved: " + describe(e);
    }
  } else {
    fork->manager = state_->manager.clone();
  }
  fork->systemPrompt = state_->systemPrompt;
  fork->promptTokens = state_->promptTokens;
  fork->responseTokens = state_->responseTokens;
  fork->finishReason = state_->finishReason;
  if (fork->lastError.empty()) fork->lastError = state_->lastError;
  return Conversation(std::move(fork));
}

AI Conversation::getAI() const {
  return AI(state_->ai);
}

int Conversation::getPromptTokensUsed() const {
  std::lock_guard lock(state_->mutex);
  return state_->promptTokens;
}

int Conversation::getResponseTokensUsed() const {
  std::lock_guard lock(state_->mutex);
  return state_->responseTokens;
}

int Conversation::getTotalTokensUsed() const {
  std::lock_guard lock(state_->mutex);
  return state_->promptTokens + state_->responseTokens;
}

std::string Conversation::getFinishReason() const {
  std::lock_guard lock(state_->mutex);
  return state_->finishReason;
}

std::string Conversation::lastError() const {
  std::lock_guard lock(state_->mutex);
  return state_->lastError;
}

}  // namespace parley
