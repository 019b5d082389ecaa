// Writing JSON text directly, for the request body (the one place where building nlohmann
// values costs more than the network: docs/architecture.md, "Performance").
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "parley/message.hpp"

namespace parley::detail {

// Appends `text` as a JSON string literal (quotes included). Throws ValidationError naming
// `field` if the text is not valid UTF-8 (no server would accept it).
void appendJsonString(std::string& out, std::string_view text, const char* field);

// Appends encodeMessage(message, options) (llm.hpp) to `out`, leaving out the keys of
// message.extra named in `skipExtra`.
void appendMessageJson(std::string& out, const Message& message, const MessageJsonOptions& options,
                       std::span<const std::string_view> skipExtra = {});

}  // namespace parley::detail
