// A chat history of n messages (a system prompt, then alternating questions and answers of
// about 60 bytes each), shared by the benchmarks that measure cost against history length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parley/message.hpp"

namespace parley::bench {

inline std::vector<Message> historyOf(int64_t n) {
  std::vector<Message> messages{Message::system("You are a helpful assistant.")};
  for (int64_t i = 1; i < n; ++i) {
    messages.push_back(i % 2 ? Message::user("Question " + std::to_string(i) +
                                             ": what do you think about this paragraph?")
                             : Message::assistant("Answer " + std::to_string(i) +
                                                  ": it reads well, but it could be shorter."));
  }
  return messages;
}

}  // namespace parley::bench
