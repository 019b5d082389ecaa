#include "mock/embeddings.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "parley/errors.hpp"
#include "parley/part.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool isWordByte(unsigned char c) {
  return std::isalnum(c) != 0 || c >= 0x80;
}

std::string base64(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    for (int b = 0; b < 4; ++b)
      bytes[i * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return base64Encode(bytes);
}

}  // namespace

std::vector<float> embedText(std::string_view text, int dimensions) {
  std::vector<double> acc(static_cast<std::size_t>(dimensions), 0.0);
  std::string word;
  bool any = false;
  auto flush = [&] {
    if (word.empty()) return;
    // Mix the hash so that nearby words do not share low bits (FNV's are weak for a modulo).
    std::uint64_t h = fnv1a(word);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    acc[h % acc.size()] += (h >> 63) ? -1.0 : 1.0;
    any = true;
    word.clear();
  };
  for (unsigned char c : text) {
    if (isWordByte(c)) {
      word += static_cast<char>(c < 0x80 ? std::tolower(c) : c);
    } else {
      flush();
    }
  }
  flush();
  double norm = 0;
  for (double x : acc)
    norm += x * x;
  std::vector<float> out(acc.size(), 0.0f);
  if (!any || norm == 0) {
    out[0] = 1.0f;
    return out;
  }
  norm = std::sqrt(norm);
  for (std::size_t i = 0; i < acc.size(); ++i)
    out[i] = static_cast<float>(acc[i] / norm);
  return out;
}

json embeddingsResponse(const json& body, int defaultDimensions) {
  if (!body.is_object()) throw ValidationError("body", "expected a JSON object");
  if (!body.contains("input")) throw ValidationError("input", "is required");
  int dimensions = defaultDimensions;
  if (body.contains("dimensions")) {
    if (!body["dimensions"].is_number_integer() || body["dimensions"].get<long>() < 1 ||
        body["dimensions"].get<long>() > 65536) {
      throw ValidationError("dimensions", "expected an integer between 1 and 65536");
    }
    dimensions = body["dimensions"].get<int>();
  }
  std::string format = "float";
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    if (!body["encoding_format"].is_string()) {
      throw ValidationError("encoding_format", "expected \"float\" or \"base64\"");
    }
    format = body["encoding_format"].get<std::string>();
    if (format != "float" && format != "base64") {
      throw ValidationError("encoding_format", "expected \"float\" or \"base64\"");
    }
  }
  // Normalise the input to a list of texts; token arrays become their numbers as words.
  std::vector<std::string> texts;
  auto tokensText = [](const json& tokens, const std::string& field) {
    std::string t;
    for (const auto& tok : tokens) {
      if (!tok.is_number_integer()) throw ValidationError(field, "expected token integers");
      t += std::to_string(tok.get<long>()) + " ";
    }
    return t;
  };
  const json& input = body["input"];
  if (input.is_string()) {
    texts.push_back(input.get<std::string>());
  } else if (input.is_array() && !input.empty()) {
    if (input[0].is_number_integer()) {
      texts.push_back(tokensText(input, "input"));
    } else {
      for (std::size_t i = 0; i < input.size(); ++i) {
        std::string field = "input[" + std::to_string(i) + "]";
        if (input[i].is_string()) {
          texts.push_back(input[i].get<std::string>());
        } else if (input[i].is_array()) {
          texts.push_back(tokensText(input[i], field));
        } else {
          throw ValidationError(field, "expected a string or an array of tokens");
        }
      }
    }
  } else {
    throw ValidationError("input", "expected a string or a non-empty array");
  }
  json data = json::array();
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      throw ValidationError(input.is_string() ? "input" : "input[" + std::to_string(i) + "]",
                            "must not be empty");
    }
    tokens += (texts[i].size() + 3) / 4;
    std::vector<float> v = embedText(texts[i], dimensions);
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      item["embedding"] = base64(v);
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", body.value("model", "parley-mock-embedding")},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

}  // namespace parley::mock
