// A remote Agent2Agent (A2A 1.0) agent offered to the model as a tool (docs/a2a.md, "The client
// side"): its Agent Card is read for its name, description, skills and JSON-RPC interface; a call
// of the tool sends the model's message to the agent and follows the task it makes to its end
// (over its stream when the agent streams, its updates as the call's progress); the answer is
// the task's artifacts as text. A task that needs input
// (TASK_STATE_INPUT_REQUIRED) asks through the call's ToolContext::ask when the caller has one
// (a durable run: the question becomes the run's own, answered from any process), otherwise the
// tool's result says what the agent asks and the model may answer with `task_id`. In a durable
// run the task's id is journaled (ToolContext::checkpoint), so that a worker that takes the run
// over follows the same remote task instead of starting another.
//
// Ownership: addA2aAgent() copies the options into the tool's handler. Thread-safety: the
// handler may run on any number of threads at once; each call makes its own requests.
// Failures: an unreachable agent, a card or answer past a cap, or a failed remote task is the
// tool call's error result (never an exception out of the tool loop); fetchA2aAgentCard() throws
// ConnectionError, TimeoutError, HttpError or ProtocolError naming the URL.
//
// Signed Agent Cards (A2A 1.0 section 8.4, docs/a2a.md "Signed Agent Card"): A2aCardSigner signs
// a card (the service's), verifyA2aCardSignature() checks one against a public key (the client's
// `cardPublicKey`). Both are immutable after construction and safe from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley {

class ToolRegistry;

// --- Signed Agent Cards ------------------------------------------------------------------------

// What a card's signatures cover (section 8.4.1): the card without `signatures`, its empty values
// (null, "", [], {}) left out as the official SDKs leave them out, canonicalized by RFC 8785.
std::string a2aCardSigningPayload(const nlohmann::json& card);

// The RFC 7638 thumbprint (SHA-256, base64url) of a PEM key's public half: the `kid` a signer
// uses unless told another. ValidationError when the PEM is not an EC P-256 or RSA key.
std::string a2aKeyThumbprint(std::string_view pem);

// A private key that signs Agent Cards: EC P-256 (ES256) or RSA of 2048 bits or more (RS256),
// in PEM (PKCS#8 or the traditional form, not encrypted).
class A2aCardSigner {
 public:
  // `keyId`: the protected header's `kid` (empty: the key's thumbprint); `jku`: an optional URL
  // of a JWK Set that holds the public key. ValidationError naming what is wrong with the key.
  explicit A2aCardSigner(std::string_view privateKeyPem, std::string keyId = "",
                         std::string jku = "");
  // The card with `signatures` replaced by one JWS signature (protected header {"alg", "kid",
  // "typ": "JOSE"[, "jku"]}, base64url) over a2aCardSigningPayload(card).
  nlohmann::json sign(nlohmann::json card) const;
  const std::string& keyId() const noexcept { return keyId_; }
  const std::string& algorithm() const noexcept { return algorithm_; }

  struct Key;  // the OpenSSL key (a2a_card_signature.cpp)

 private:
  std::shared_ptr<const Key> key_;
  std::string keyId_;
  std::string jku_;
  std::string algorithm_;
};

// Caps on a card's signatures, read before any is checked.
struct A2aCardSignatureLimits {
  std::size_t maxSignatures = 8;               // entries of `signatures`
  std::size_t maxProtectedHeaderBytes = 4096;  // one `protected`, base64url
  std::size_t maxSignatureBytes = 2048;        // one `signature`, base64url (RSA 8192: 1366)
};

// Checks that at least one of the card's signatures verifies with `publicKeyPem` (an EC P-256
// or RSA public key, or a private key's PEM) over a2aCardSigningPayload(card) (or, for signers
// that keep empty values, the card as it is without `signatures`). Returns the `kid` of the
// signature that verified. ProtocolError naming the problem: no signatures, past a cap, a
// malformed entry, signed by another key (its kid is not the key's), or changed since it was
// signed (a signature of this key that does not match the content); ValidationError for a key
// that cannot be read.
std::string verifyA2aCardSignature(const nlohmann::json& card, std::string_view publicKeyPem,
                                   const A2aCardSignatureLimits& limits = {});

// --- The client ----------------------------------------------------------------------------------

struct A2aAgentOptions {
  // The agent's base URL (its card at URL/.well-known/agent-card.json) or the card's own URL
  // (ending in .json). http or https.
  std::string url;
  std::string bearerToken;  // sent as Authorization: Bearer (never logged)
  std::vector<std::pair<std::string, std::string>> headers{};
  std::chrono::milliseconds httpTimeout{30'000};   // each request
  std::chrono::milliseconds taskTimeout{600'000};  // one call, the remote task followed to its end
  std::size_t maxCardBytes = 256 << 10;            // the Agent Card
  std::size_t maxResponseBytes = 4 << 20;          // one JSON-RPC answer
  std::size_t maxArtifacts = 32;                   // artifacts of a task read
  std::size_t maxAnswerBytes = 256 << 10;          // the text the model gets (cut past it)
  std::size_t maxSkills = 64;                      // skills kept from the card
  std::size_t maxStreamEventBytes = 1 << 20;       // one event of a task's stream
  std::size_t maxStreamEvents = 10'000;            // events of one stream
  int maxInputRounds = 8;                          // INPUT_REQUIRED answered in one call
  // A PEM public key: when set, the card must carry a signature that verifies with it
  // (verifyA2aCardSignature) or it is refused, before anything of it is used.
  std::string cardPublicKey{};
  A2aCardSignatureLimits cardSignatureLimits{};
};

struct A2aSkill {
  std::string id;
  std::string name;
  std::string description;
};

struct A2aAgentCard {
  std::string name;
  std::string description;
  std::string jsonRpcUrl;  // the card's JSONRPC interface of protocol version 1.0
  bool streaming = false;  // capabilities.streaming: tasks are followed over SSE
  std::vector<A2aSkill> skills;
  std::string signedBy;  // with cardPublicKey: the kid of the signature that verified
};

// Reads and checks the card (a JSONRPC 1.0 interface is required).
A2aAgentCard fetchA2aAgentCard(const A2aAgentOptions& options);

// What a task ended in, as far as one call followed it.
struct A2aTaskResult {
  std::string taskId;
  std::string contextId;
  std::string state;   // "TASK_STATE_COMPLETED", ..., "TASK_STATE_INPUT_REQUIRED"
  std::string text;    // the artifacts' text (data parts as JSON), else the status message's
  std::string prompt;  // INPUT_REQUIRED: what the agent asks
};

// How a caller follows a task.
struct A2aFollow {
  std::stop_token stop{};
  // Told the task (its id and context) as soon as the agent has made it, before it ends: where
  // a caller keeps the handle of the remote work (ToolContext::checkpoint).
  std::function<void(const A2aTaskResult& task)> started{};
  // A streamed task's updates as they come: a status message's text ({"task", "state"}) or an
  // artifact's chunk ({"task", "artifact", "append", "last_chunk"}), the text cut at 4 KiB.
  std::function<void(const std::string& text, const nlohmann::json& data)> progress{};
};

// Sends `text` (to task `taskId` when it waits for input, else as a new task on `contextId` when
// given) and follows the task until it ends, needs input or taskTimeout passes. An agent whose
// card says capabilities.streaming gets SendStreamingMessage and the task is followed over its
// stream (then by GetTask if the stream ends early); else SendMessage with `returnImmediately`
// (so that `started` learns the task while it works) and GetTask until it settles.
A2aTaskResult sendA2aMessage(const A2aAgentCard& card, const A2aAgentOptions& options,
                             const std::string& text, const std::string& taskId = "",
                             const std::string& contextId = "", const A2aFollow& follow = {});

// Picks up a task made earlier (by a call that was cut short): reads it (GetTask) and follows it
// (SubscribeToTask when the agent streams, else GetTask) until it ends, needs input or
// taskTimeout passes. ProtocolError when the agent no longer knows it.
A2aTaskResult followA2aTask(const A2aAgentCard& card, const A2aAgentOptions& options,
                            const std::string& taskId, const A2aFollow& follow = {});

// Reads the card and registers the tool `name` ({"message", "task_id"}), described by the card's
// description and skills. Returns the card. A call checkpoints its task as soon as it exists
// (ToolContext::checkpoint: {"agent": name, "task", "context", "round"}, round: the questions
// answered so far) and, run again with that handle (ToolContext::resumeFrom: a durable run taken
// over), follows the same task instead of sending its message again.
A2aAgentCard addA2aAgent(ToolRegistry& registry, const std::string& name,
                         const A2aAgentOptions& options);

}  // namespace parley
