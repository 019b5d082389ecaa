// History, batches and context operations without a model: the README's second example.
#include <iostream>

#include <parley/parley.hpp>

int main() {
  parley::ConversationManager conversation;  // no model attached: a message store
  conversation.addMessage(parley::Message::system("You are terse."));
  conversation.addMessage(parley::Message::user("Hello"));
  conversation.addMessage(parley::Message::assistant("Hi."));
  auto lastUser = conversation.getRecentMessagesByRole(parley::Role::User, 1);  // O(1)

  // Keep only the last user message in view (a context-processor node's config); storage keeps
  // everything.
  auto op = parley::parseContextOperation(
      nlohmann::json::parse(R"({"operation":"truncate","truncate":{"role":"user","keepLast":1}})"));
  auto result = parley::applyContextOperation(conversation, op);  // a new batch
  std::cout << result.operation << ": " << result.messageCount << " visible\n";
  conversation.rollbackToBatch(0);  // undo: the earlier view, exactly

  parley::ConversationManager fork = conversation.clone();  // O(1): shares the history
  fork.addMessage(parley::Message::user("Only in the fork"));
  nlohmann::json snapshot = conversation.createSnapshot();  // "format": "parley.snapshot/1"
  std::cout << lastUser.at(0).content << " | " << conversation.getMessageCount() << " vs "
            << fork.getMessageCount() << " | " << snapshot["format"] << "\n";
  return 0;
}
