// Token counting as the rest of parley uses it: text, one message, a whole chat request.
//
// Counts are exact (the tiktoken-compatible BPE of bpe.hpp) when the encoding's vocabulary is
// installed, and estimates otherwise: ceil(code points / 2.5), flagged in TokenCount::estimate.
// Vocabularies are files "<name>.tiktoken" installed by scripts/fetch-vocab.sh; they are looked
// up in vocabularySearchPath() and never fetched at run time.
//
// Chat requests are counted the way OpenAI's cookbook "How to count tokens with tiktoken"
// counts them (it matches the API's prompt_tokens on its published examples, which the tests
// replay): 3 tokens per message plus its role and content, 1 more for a name, 3 for the reply
// priming, and the cookbook's formula for tool definitions. Tool calls inside assistant
// messages are not covered by the cookbook: parley adds the tokens of each call's name and
// arguments plus kToolCallOverheadTokens, an estimate.
//
// Error bound for tool definitions: the formula reproduces the cookbook's published
// prompt_tokens exactly (101 for gpt-4o / o200k_base, 105 for gpt-4 / cl100k_base: error 0).
// It models name, description, and each top-level property's name, type, description and enum
// values; parameters it does not model (nested objects, arrays' items, anyOf, defaults,
// `required`) are added as the tokens of their compact JSON, which over-counts them. No other
// measurement against the live API was possible here, so treat tool-definition counts beyond
// that shape as estimates.
//
// Thread-safety: loadEncoding()/findEncoding() may be called from any thread; they share one
// loaded Encoding per vocabulary file for the whole process. A TokenCounter is an immutable,
// cheap-to-copy handle; share it freely.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/bpe.hpp"
#include "parley/message.hpp"

namespace parley {

inline constexpr std::string_view kDefaultEncoding = "o200k_base";

// The chat format's fixed costs (cookbook, models since gpt-3.5-turbo-0613 and gpt-4o).
inline constexpr int kTokensPerMessage = 3;  // <|start|>{role}\n{content}<|end|>\n
inline constexpr int kTokensPerName = 1;
inline constexpr int kReplyPrimingTokens = 3;      // <|start|>assistant<|message|>
inline constexpr int kToolCallOverheadTokens = 3;  // parley's estimate per tool call

// A token count and whether it is exact.
struct TokenCount {
  int64_t tokens = 0;
  bool estimate = false;  // true when no vocabulary was available: ceil(code points / 2.5)

  TokenCount& operator+=(const TokenCount& other) {
    tokens += other.tokens;
    estimate = estimate || other.estimate;
    return *this;
  }
  bool operator==(const TokenCount&) const = default;
};

// Where "<name>.tiktoken" is looked for, in order. When the environment variable
// PARLEY_DATA_DIR is set (non-empty) it is the only directory; otherwise the build tree's data
// directory, then the installed one (${CMAKE_INSTALL_DATADIR}/parley).
std::vector<std::filesystem::path> vocabularySearchPath();

// The encoding `name`, loaded on first use from the first vocabulary file found and shared by
// the whole process afterwards. Throws ValidationError for a name parley does not know, Error
// when no vocabulary file is found or the file is malformed.
std::shared_ptr<const Encoding> loadEncoding(std::string_view name);
// As loadEncoding(), but returns nullptr when no vocabulary file is found or the one found is
// malformed, so a TokenCounter falls back to the estimate instead of failing.
std::shared_ptr<const Encoding> findEncoding(std::string_view name);

// ceil(code points / 2.5), code points counted as UTF-8 lead bytes (a stray continuation byte
// of invalid UTF-8 adds nothing).
int64_t estimateTokens(std::string_view text) noexcept;

// Counts with one encoding, or estimates when its vocabulary is missing.
class TokenCounter {
 public:
  // Uses findEncoding(name): exact when the vocabulary is installed, estimates otherwise.
  // Throws ValidationError for an unknown encoding name.
  explicit TokenCounter(std::string_view encodingName = kDefaultEncoding);
  // Uses `encoding`; nullptr means estimates (named `encodingName`).
  explicit TokenCounter(std::shared_ptr<const Encoding> encoding,
                        std::string_view encodingName = kDefaultEncoding);

  const std::string& encodingName() const noexcept { return name_; }
  bool exact() const noexcept { return encoding_ != nullptr; }
  // The loaded encoding, or nullptr when estimating.
  const std::shared_ptr<const Encoding>& encoding() const noexcept { return encoding_; }

  // Special tokens in `text` count as plain text.
  TokenCount count(std::string_view text) const;

  // How image parts are priced (part.hpp): OpenAI's tiles unless set, Anthropic's pixels for
  // the anthropic protocol. Set it before the counter is shared between threads.
  ImageTokenRule imageRule() const noexcept { return imageRule_; }
  void setImageRule(ImageTokenRule rule) noexcept { imageRule_ = rule; }

 private:
  std::shared_ptr<const Encoding> encoding_;
  std::string name_;
  ImageTokenRule imageRule_ = ImageTokenRule::OpenAiTiles;
};

// Calibration of a local count against what a server reports (docs/cost.md, "Calibrated
// counts"): where the local tokenizer is not the model's (an estimate without a vocabulary, a
// Claude or Llama model counted with o200k_base), the prompt_tokens each reply reports teach a
// ratio, reported / local, kept as an exponentially weighted moving average and bounded, so that
// local counts times the ratio (the token-limit check's) come within a few percent of the
// server's after a few replies.
// Thread-safety: every method may be called from any thread (conversations of one model may
// share one).
class CalibratedCounter {
 public:
  struct Options {
    double weight = 0.5;     // of each new observation in the average, in (0, 1]
    double minRatio = 0.25;  // the ratio is kept within [minRatio, maxRatio]
    double maxRatio = 4.0;
    int64_t minTokens = 16;  // observations of fewer local tokens are too noisy: ignored
  };
  CalibratedCounter();
  // ValidationError for options out of range.
  explicit CalibratedCounter(Options options);

  // One request: `localTokens` counted here before it was sent, `reportedTokens` the reply's
  // prompt_tokens. Ignored when either is below minTokens or not positive.
  void observe(int64_t localTokens, int64_t reportedTokens);
  double ratio() const;          // 1 until the first observation
  int64_t observations() const;  // taken so far
  // `localTokens` x ratio(), rounded.
  int64_t calibrate(int64_t localTokens) const;

 private:
  Options options_;
  mutable std::mutex mutex_;
  double ratio_ = 1.0;
  int64_t observations_ = 0;
};

// One message's share of a chat request's prompt: kTokensPerMessage, its role, content and
// name (+kTokensPerName), and its tool calls (name + arguments + kToolCallOverheadTokens each).
// Image parts add imageTokens() by the counter's rule, from the size their header declares; an
// image given by URL (size unknown) counts as 1024x1024 and makes the count an estimate, as do
// audio and binary file parts (a text file's bytes count as text).
// Depends only on the message: callers may cache it per message.
TokenCount countMessageTokens(const Message& message, const TokenCounter& counter);

// The prompt tokens of a `tools` array (OpenAI shape: [{"type":"function","function":{...}}]);
// 0 for null or an empty array. Throws ValidationError ("tools[i]...") for a non-array or an
// entry without function.name.
TokenCount countToolTokens(const nlohmann::json& tools, const TokenCounter& counter);

// The prompt_tokens the API reports for a chat request with these messages and tools: the
// messages, the reply priming, and the tool definitions.
TokenCount countChatTokens(const std::vector<Message>& messages, const nlohmann::json& tools,
                           const TokenCounter& counter);
// As above with TokenCounter(encodingName).
TokenCount countChatTokens(const std::vector<Message>& messages, const nlohmann::json& tools,
                           std::string_view encodingName = kDefaultEncoding);

}  // namespace parley
