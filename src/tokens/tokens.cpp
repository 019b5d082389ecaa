#include "parley/tokens.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <system_error>

#include "parley/errors.hpp"

namespace parley {

namespace {

const EncodingSpec& specOrThrow(std::string_view name) {
  const EncodingSpec* spec = findEncodingSpec(name);
  if (!spec) {
    std::string known;
    for (const std::string& n : knownEncodingNames())
      known += (known.empty() ? "" : ", ") + n;
    throw ValidationError("encoding",
                          "unknown encoding \"" + std::string(name) + "\" (known: " + known + ")");
  }
  return *spec;
}

// One loaded Encoding per vocabulary file, for the whole process. Loading holds the lock: two
// threads asking at once get the same instance and the file is read once. A file that fails to
// load is remembered with its error, so it is not read again: loadEncoding() throws that error,
// findEncoding() answers nullptr (the callers estimate, as without a vocabulary).
std::shared_ptr<const Encoding> findOrLoad(const EncodingSpec& spec, bool required) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::shared_ptr<const Encoding>> loaded;
  static std::map<std::filesystem::path, std::string> failed;
  for (const std::filesystem::path& dir : vocabularySearchPath()) {
    std::filesystem::path file = dir / (spec.name + ".tiktoken");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) continue;
    std::lock_guard lock(mutex);
    auto it = loaded.find(file);
    if (it != loaded.end()) return it->second;
    auto failure = failed.find(file);
    if (failure == failed.end()) {
      try {
        auto encoding = Encoding::fromRankFile(spec, file);
        loaded.emplace(file, encoding);
        return encoding;
      } catch (const std::exception& e) {
        failure =
            failed.emplace(file, "the vocabulary " + file.string() + " cannot be used: " + e.what())
                .first;
      }
    }
    if (required) throw Error(failure->second);
    return nullptr;
  }
  if (!required) return nullptr;
  std::string searched;
  for (const auto& dir : vocabularySearchPath())
    searched += " " + dir.string();
  throw Error("no vocabulary " + spec.name + ".tiktoken found in:" + searched +
              " (run scripts/fetch-vocab.sh DIR, or set PARLEY_DATA_DIR)");
}

std::string withoutFinalPeriod(std::string s) {
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string typeText(const nlohmann::json& type) {
  if (type.is_string()) return type.get<std::string>();
  if (type.is_array()) {
    std::string out;
    for (const auto& t : type) {
      if (!out.empty()) out += " | ";
      out += t.is_string() ? t.get<std::string>() : t.dump();
    }
    return out;
  }
  return type.is_null() ? "" : type.dump();
}

// The non-text parts of a message (its text is in Message::content, counted by the caller).
TokenCount countPartTokens(const Message& message, const TokenCounter& counter) {
  TokenCount total{0, !counter.exact()};
  for (const Part& part : partsOf(message)) {
    const ImageDetail detail = part.detail.value_or(ImageDetail::Auto);
    switch (part.kind) {
      case PartKind::Text:
        break;
      case PartKind::Image: {
        std::optional<ImageSize> size = imageSize(part.bytes);
        if (!size) {
          size = ImageSize{1024, 1024};
          total.estimate = true;
        }
        total.tokens += imageTokens(*size, detail, counter.imageRule());
        break;
      }
      case PartKind::File:
        if (part.mimeType == "text/plain") {
          total += counter.count(part.bytes);
        } else {
          total.estimate = true;
        }
        break;
      case PartKind::Audio:
        total.estimate = true;
        break;
    }
  }
  return total;
}

}  // namespace

std::vector<std::filesystem::path> vocabularySearchPath() {
  if (const char* env = std::getenv("PARLEY_DATA_DIR"); env && *env) {
    return {std::filesystem::path(env)};
  }
  return {std::filesystem::path(PARLEY_BUILD_DATA_DIR),
          std::filesystem::path(PARLEY_DEFAULT_DATA_DIR)};
}

std::shared_ptr<const Encoding> loadEncoding(std::string_view name) {
  return findOrLoad(specOrThrow(name), true);
}

std::shared_ptr<const Encoding> findEncoding(std::string_view name) {
  return findOrLoad(specOrThrow(name), false);
}

int64_t estimateTokens(std::string_view text) noexcept {
  // Code points = bytes that are not UTF-8 continuation bytes; a stray continuation byte
  // (invalid UTF-8) is not counted, which keeps this a single pass.
  int64_t codePoints = 0;
  for (unsigned char c : text)
    codePoints += (c & 0xC0) != 0x80;
  return (codePoints * 2 + 4) / 5;  // ceil(codePoints / 2.5)
}

TokenCounter::TokenCounter(std::string_view encodingName)
    : encoding_(findEncoding(encodingName)), name_(encodingName) {}

TokenCounter::TokenCounter(std::shared_ptr<const Encoding> encoding, std::string_view encodingName)
    : encoding_(std::move(encoding)),
      name_(encoding_ ? encoding_->name() : std::string(encodingName)) {}

TokenCount TokenCounter::count(std::string_view text) const {
  if (encoding_) return {static_cast<int64_t>(encoding_->count(text)), false};
  return {estimateTokens(text), true};
}

TokenCount countMessageTokens(const Message& message, const TokenCounter& counter) {
  TokenCount total{kTokensPerMessage, !counter.exact()};
  total += counter.count(toString(message.role));
  total += counter.count(message.content);
  if (hasParts(message)) total += countPartTokens(message, counter);
  if (!message.name.empty()) {
    total += counter.count(message.name);
    total.tokens += kTokensPerName;
  }
  for (const ToolCall& call : message.toolCalls) {
    total.tokens += kToolCallOverheadTokens;
    total += counter.count(call.name);
    total += counter.count(call.arguments.empty() ? std::string_view("{}") : call.arguments);
  }
  return total;
}

TokenCount countToolTokens(const nlohmann::json& tools, const TokenCounter& counter) {
  TokenCount total{0, !counter.exact()};
  if (tools.is_null()) return total;
  if (!tools.is_array()) throw ValidationError("tools", "must be an array of tool definitions");
  if (tools.empty()) return total;
  // The cookbook's constants: gpt-4o/gpt-4o-mini (o200k_base) start each function with 7
  // tokens, gpt-3.5-turbo/gpt-4 (cl100k_base) with 10; the rest are shared.
  const int funcInit = counter.encodingName() == "cl100k_base" ? 10 : 7;
  constexpr int kPropInit = 3, kPropKey = 3, kEnumInit = -3, kEnumItem = 3, kFuncEnd = 12;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = "tools[" + std::to_string(i) + "]";
    const auto& tool = tools[i];
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      throw ValidationError(field + ".function", "must be an object");
    }
    const auto& fn = tool["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) {
      throw ValidationError(field + ".function.name", "must be a string");
    }
    std::string description;
    if (fn.contains("description") && fn["description"].is_string()) {
      description = fn["description"].get<std::string>();
    }
    total.tokens += funcInit;
    total += counter.count(fn["name"].get<std::string>() + ":" + withoutFinalPeriod(description));
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) continue;
    const auto& params = fn["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object() ||
        params["properties"].empty()) {
      continue;
    }
    total.tokens += kPropInit;
    for (const auto& [key, prop] : params["properties"].items()) {
      total.tokens += kPropKey;
      std::string type, propDescription;
      nlohmann::json rest = nlohmann::json::object();
      if (prop.is_object()) {
        for (const auto& [k, v] : prop.items()) {
          if (k == "type") {
            type = typeText(v);
          } else if (k == "description" && v.is_string()) {
            propDescription = v.get<std::string>();
          } else if (k == "enum" && v.is_array()) {
            total.tokens += kEnumInit;
            for (const auto& item : v) {
              total.tokens += kEnumItem;
              total += counter.count(item.is_string() ? item.get<std::string>() : item.dump());
            }
          } else {
            rest[k] = v;  // not in the cookbook's model: counted as its JSON (an over-count)
          }
        }
      }
      total += counter.count(key + ":" + type + ":" + withoutFinalPeriod(propDescription));
      if (!rest.empty()) total += counter.count(rest.dump());
    }
  }
  total.tokens += kFuncEnd;
  return total;
}

TokenCount countChatTokens(const std::vector<Message>& messages, const nlohmann::json& tools,
                           const TokenCounter& counter) {
  TokenCount total{kReplyPrimingTokens, !counter.exact()};
  for (const Message& m : messages)
    total += countMessageTokens(m, counter);
  total += countToolTokens(tools, counter);
  return total;
}

TokenCount countChatTokens(const std::vector<Message>& messages, const nlohmann::json& tools,
                           std::string_view encodingName) {
  return countChatTokens(messages, tools, TokenCounter(encodingName));
}

CalibratedCounter::CalibratedCounter() : CalibratedCounter(Options{}) {}

CalibratedCounter::CalibratedCounter(Options options) : options_(options) {
  if (!(options.weight > 0 && options.weight <= 1)) {
    throw ValidationError("weight", "must be in (0, 1]");
  }
  if (!(options.minRatio > 0 && options.minRatio <= 1 && options.maxRatio >= 1)) {
    throw ValidationError("minRatio", "must satisfy 0 < minRatio <= 1 <= maxRatio");
  }
  if (options.minTokens < 1) throw ValidationError("minTokens", "must be at least 1");
}

void CalibratedCounter::observe(int64_t localTokens, int64_t reportedTokens) {
  if (localTokens < options_.minTokens || reportedTokens < options_.minTokens) return;
  const double seen =
      std::clamp(static_cast<double>(reportedTokens) / static_cast<double>(localTokens),
                 options_.minRatio, options_.maxRatio);
  std::lock_guard lock(mutex_);
  ratio_ = observations_ == 0 ? seen : ratio_ + options_.weight * (seen - ratio_);
  ++observations_;
}

double CalibratedCounter::ratio() const {
  std::lock_guard lock(mutex_);
  return ratio_;
}

int64_t CalibratedCounter::observations() const {
  std::lock_guard lock(mutex_);
  return observations_;
}

int64_t CalibratedCounter::calibrate(int64_t localTokens) const {
  return std::llround(static_cast<double>(localTokens) * ratio());
}

}  // namespace parley
