// Deterministic embeddings for the mock server: a signed hashed bag of words, L2-normalised,
// so texts that share words have a higher cosine similarity. Not a language model; enough to
// test code that stores, compares and ranks vectors.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace parley::mock {

// The vector for `text`: words are runs of letters and digits (bytes >= 0x80 count as letters),
// compared case-insensitively. REQUIRES: dimensions >= 1. A text without words gives a vector
// whose first component is 1.
std::vector<float> embedText(std::string_view text, int dimensions);

// Answers a POST /v1/embeddings body (input: a string, an array of strings, or token arrays;
// dimensions; encoding_format "float" or "base64"). Throws ValidationError naming the field.
nlohmann::json embeddingsResponse(const nlohmann::json& body, int defaultDimensions);

}  // namespace parley::mock
