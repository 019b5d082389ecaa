// How a structured call (structured_output.cpp) changes one model call of
// ConversationManager::call(): the request before it is sent, the reply before it is stored.
// Internal to parley.
#pragma once

#include <functional>

#include "parley/conversation_manager.hpp"

namespace parley {

struct ConversationManager::CallShape {
  // After the view, the pending messages and the tools are set, before the budget check.
  std::function<void(ChatRequest&, const MessageJsonOptions&)> request;
  // Before the reply is checked and stored.
  std::function<void(ChatResult&)> reply;
};

}  // namespace parley
