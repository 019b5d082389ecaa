#include <iostream>

#include <parley/parley.hpp>

int main() {
  parley::ConversationManager conversation;
  conversation.addMessage(parley::Message::system("You are terse."));
  conversation.addMessage(parley::Message::user("Hello"));
  conversation.addMessage(parley::Message::assistant("Hi."));
  std::cout << "parley consumer ok: " << conversation.getMessages().size() << " messages\n";
  return 0;
}
