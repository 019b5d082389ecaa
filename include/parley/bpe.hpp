// A byte-level BPE tokenizer that produces exactly the token ids of OpenAI's tiktoken for the
// cl100k_base and o200k_base encodings.
//
// An Encoding holds one vocabulary (the upstream .tiktoken rank file), the encoding's split
// pattern (hand-written here, no regex engine) and its special tokens (as the npm `tiktoken`
// package defines them). Load one with loadEncoding() in tokens.hpp, which shares one instance
// per process, or build one with Encoding::fromRankFile().
//
// Text handling:
// - Special tokens such as "<|endoftext|>" are ordinary text unless EncodeOptions allows them.
// - Input that is not valid UTF-8 is read as a WHATWG/Unicode decoder reads it: each maximal
//   ill-formed subsequence becomes U+FFFD. This is what tiktoken encodes when it is given such
//   bytes through a JavaScript string (TextDecoder, Buffer.toString) or Python's
//   bytes.decode(errors="replace"). decode() then returns the UTF-8 of U+FFFD for those bytes;
//   valid UTF-8 round-trips exactly.
// - Work is linear in the input, also on long runs that the split pattern cannot break (a
//   100 000-letter word): long pieces are merged with a heap instead of repeated scans.
//
// - Unicode classes (\p{L}, \p{N}, \p{M}, White_Space) come from the build machine's ICU data
//   (Debian 12: Unicode 15.0). Characters assigned in later Unicode versions may split
//   differently from a tiktoken built with newer tables.
//
// Thread-safety: an Encoding is immutable after construction; any number of threads may call
// its const methods at once (and with EncodeOptions::threads, one call uses several). Each thread
// that encodes keeps a small cache of recent pieces (about 1 MB plus at most 4096 longer pieces),
// so no call takes a lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parley {

using TokenId = uint32_t;

// The split pattern an encoding uses (its `pat_str` in tiktoken).
enum class SplitPattern { Cl100k, O200k };

// What defines an encoding besides its rank file.
struct EncodingSpec {
  std::string name;  // "cl100k_base", "o200k_base"
  SplitPattern pattern = SplitPattern::Cl100k;
  std::string patStr;  // the regex the hand-written splitter implements (tiktoken's pat_str)
  std::vector<std::pair<std::string, TokenId>> specialTokens;  // from npm tiktoken
  std::size_t rankCount = 0;                                   // lines of the rank file
  std::string sha256;                                          // of the canonical rank file
};

// The specs of the encodings parley knows, or nullptr for another name.
const EncodingSpec* findEncodingSpec(std::string_view name) noexcept;
// The names findEncodingSpec() knows, e.g. for a command line's help.
std::vector<std::string> knownEncodingNames();

struct EncodeOptions {
  // Special tokens to recognise in the text (exact names, e.g. "<|endoftext|>"); every other
  // occurrence of a special token's text is encoded as plain text. Unknown names are a
  // ValidationError.
  std::vector<std::string> allowedSpecial;
  bool allowAllSpecial = false;  // recognise every special token of the encoding
  // Threads that may share a long text (at least 1 MiB, no special tokens allowed): each takes
  // a part that starts where a piece starts, so the ids are exactly those of one thread. 1: the
  // calling thread only; 0: one per core (std::thread::hardware_concurrency()).
  unsigned threads = 1;
};

class Encoding {
 public:
  // Reads an upstream .tiktoken rank file ("<base64 bytes> <rank>" per line). Throws Error if
  // the file cannot be read or is malformed, or if its token count differs from spec.rankCount.
  // The sha256 is checked by scripts/fetch-vocab.sh when the file is installed, not here.
  static std::shared_ptr<const Encoding> fromRankFile(const EncodingSpec& spec,
                                                      const std::filesystem::path& file);
  // As fromRankFile(), from the file's contents.
  static std::shared_ptr<const Encoding> fromRankText(const EncodingSpec& spec,
                                                      std::string_view rankText);

  ~Encoding();
  Encoding(const Encoding&) = delete;
  Encoding& operator=(const Encoding&) = delete;

  const std::string& name() const noexcept;
  const EncodingSpec& spec() const noexcept;

  // The token ids of `text`, exactly as tiktoken's encode(text, allowed, disallowed=[]) gives.
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to `out` instead of returning a vector.
  void encodeInto(std::string_view text, std::vector<TokenId>& out,
                  const EncodeOptions& options = {}) const;
  // encode(text, options).size(), without building the vector.
  std::size_t count(std::string_view text, const EncodeOptions& options = {}) const;

  // The bytes of `ids` joined. Throws ValidationError ("ids") for an id the encoding lacks.
  std::string decode(std::span<const TokenId> ids) const;
  // The bytes of one token, or nullopt for an unknown id.
  std::optional<std::string_view> tokenBytes(TokenId id) const noexcept;

  // The id of a special token, or nullopt.
  std::optional<TokenId> specialTokenId(std::string_view text) const noexcept;
  // Ordinary tokens (the rank file's lines); ids of special tokens are above or among gaps.
  std::size_t rankCount() const noexcept;

  class Impl;

 private:
  explicit Encoding(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace parley
