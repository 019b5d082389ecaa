// The attoboy-style facade: AI and Conversation handles that never throw.
//
//   parley::AI ai("http://127.0.0.1:8080/v1", "sk-...", "gpt-4o-mini");
//   parley::Conversation convo = ai.createConversation();
//   std::string reply = convo.ask("Hello, who are you?");
//   if (reply.empty()) std::cerr << convo.lastError() << "\n";
//
// Handles. Copying an AI or a Conversation, or assigning one, shares the underlying state: both
// handles see the same configuration, history and counters. Conversation::duplicate() forks: the
// fork starts with the same history and counters and then evolves alone. A fork does not copy the
// history; it shares the common prefix (ConversationManager::clone()), so it costs O(1) whatever
// the history's length.
//
// Errors. ask() returns "" on any failure (network, HTTP status, timeout, an empty reply) and
// leaves the history exactly as it was; lastError() says why. Nothing here throws except
// std::bad_alloc.
//
// Base URL. As attoboy does, a base URL without a path gets "/v1": "https://api.openai.com"
// means "https://api.openai.com/v1". A URL with a path is taken as given.
//
// Thread-safety: every handle may be used from several threads at once. No lock is held while
// waiting for the network. Two asks on one shared Conversation at the same time both succeed and
// keep the history well-formed (each turn is a user message followed by its reply); the later
// one to finish was generated without seeing the other's turn.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace parley {

class Conversation;
class ConversationStore;
class LlmClient;

// An embedding vector (createEmbedding). Empty when the call failed.
class Embedding {
 public:
  Embedding() = default;
  explicit Embedding(std::vector<float> values);

  int getDimensions() const { return static_cast<int>(values_.size()); }
  bool isEmpty() const { return values_.empty(); }
  const std::vector<float>& values() const { return values_; }
  // Cosine similarity in [-1, 1]; 0 when either is empty, a zero vector, or the dimensions differ.
  float compare(const Embedding& other) const;

 private:
  std::vector<float> values_;
};

class AI {
 public:
  AI(const std::string& baseUrl, const std::string& apiKey, const std::string& model);
  // For tests and other transports: the conversations call `client` instead of building an
  // OpenAiClient. createEmbedding() still uses HTTP with baseUrl/apiKey.
  AI(std::shared_ptr<LlmClient> client, const std::string& baseUrl, const std::string& apiKey,
     const std::string& model);

  // Every setting takes effect at the next call of this AI and of every conversation that
  // shares it (created from it, forked from one, or reached through getAI()). A new system
  // prompt replaces the one opening such a conversation's view at its next ask (a context
  // operation, so the earlier view stays in storage); "" removes it.
  AI& setModel(const std::string& model);
  AI& setSystemPrompt(const std::string& prompt);
  AI& setMaxTokens(int maxTokens);                  // <= 0: the server's default
  AI& setJsonMode(bool enabled);                    // response_format {"type": "json_object"}
  AI& setTemperature(double temperature);           // < 0: the server's default
  AI& setEmbeddingModel(const std::string& model);  // default "text-embedding-3-small"

  std::string getModel() const;
  std::string getSystemPrompt() const;
  int getMaxTokens() const;  // -1 when unset
  bool getJsonMode() const;
  double getTemperature() const;  // -1 when unset
  std::string getBaseUrl() const;
  std::string getEmbeddingModel() const;

  // One stateless turn (the system prompt, then `prompt`). "" on failure; see lastError().
  // timeoutMs bounds the whole call, retries included; -1: the client's own timeouts.
  std::string ask(const std::string& prompt, int timeoutMs = -1);

  // Cumulative over every call made through this AI: its own asks and its conversations'.
  int getPromptTokensUsed() const;
  int getResponseTokensUsed() const;
  int getTotalTokensUsed() const;  // == prompt + response, always
  void resetTokenTracking();

  std::string getFinishReason() const;  // of the last ask on this AI ("" before any)
  std::string lastError() const;        // of the last failed call on this AI ("" before any)

  Conversation createConversation();
  // A conversation kept in `store` under `threadId`: restored when the thread exists, created
  // otherwise; each successful ask is saved as one turn. If the store fails here, the returned
  // conversation is in memory only and its lastError() says why. Two handles asking at once on
  // one persisted conversation: the later save loses with a conflict and that ask returns "".
  Conversation createConversation(std::shared_ptr<ConversationStore> store,
                                  const std::string& threadId);
  // POST {baseUrl}/embeddings. An empty Embedding on failure; see lastError().
  Embedding createEmbedding(const std::string& text, int timeoutMs = -1);

  struct State;

 private:
  friend class Conversation;
  explicit AI(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class Conversation {
 public:
  Conversation(const Conversation&) = default;             // shares the conversation
  Conversation& operator=(const Conversation&) = default;  // shares the conversation
  ~Conversation() = default;

  // Appends the prompt, sends the history, appends the reply and returns it. "" on failure,
  // with the history unchanged; see lastError().
  std::string ask(const std::string& prompt, int timeoutMs = -1);

  // Even indices are user prompts, odd ones the assistant's replies ("" marks a prompt that got
  // no reply, e.g. the last entry of a list set with an odd length followed by another ask).
  std::vector<std::string> getConversationList() const;
  // Replaces the history (after the AI's system prompt) and resets the counters. False, with
  // nothing changed, for a list it cannot take: an empty user entry.
  bool setConversationList(const std::vector<std::string>& list);

  // A fork: same history and counters, then independent. A conversation made with a store
  // forks its stored thread too (the prefix is shared in the store), and the fork saves its
  // own turns there; if that fails the fork still works, unsaved, and lastError() says why.
  Conversation duplicate() const;
  AI getAI() const;

  int getPromptTokensUsed() const;
  int getResponseTokensUsed() const;
  int getTotalTokensUsed() const;  // == prompt + response, always
  std::string getFinishReason() const;
  std::string lastError() const;

  struct State;

 private:
  friend class AI;
  Conversation() = default;
  explicit Conversation(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace parley
