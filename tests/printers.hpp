// Readable GoogleTest output for parley's values.
#pragma once

#include <ostream>

#include "parley/message.hpp"

namespace parley {

inline void PrintTo(const Message& message, std::ostream* os) {
  *os << toJson(message).dump();
}
inline void PrintTo(const ToolCall& call, std::ostream* os) {
  *os << "ToolCall{" << call.id << ", " << call.name << ", " << call.arguments << "}";
}

}  // namespace parley
