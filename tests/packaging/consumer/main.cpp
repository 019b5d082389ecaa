#include <iostream>

#include <parley/parley.hpp>
#include <parley/version.hpp>
#ifdef CONSUMER_WITH_POSTGRES
#include <parley/postgres_store.hpp>
#endif

int main() {
  parley::ConversationManager conversation;
  conversation.addMessage(parley::Message::system("You are terse."));
  conversation.addMessage(parley::Message::user("Hello"));
  conversation.addMessage(parley::Message::assistant("Hi."));
  std::cout << "parley " << parley::kVersion
            << " consumer ok: " << conversation.getMessages().size() << " messages\n";
  // No server listens on this socket directory: with the component the URL reaches libpq (a
  // StoreError naming the connection failure); without it openStore names the missing component.
  const std::string url = "postgresql://nobody@/none?host=/nonexistent-parley-consumer-dir";
#ifdef CONSUMER_WITH_POSTGRES
  parley::registerPostgresStore();
#endif
  try {
    parley::openStore(url);
    std::cout << "postgres: opened?\n";
    return 1;
  } catch (const parley::StoreError& e) {
    std::cout << "postgres: store error\n";
  } catch (const parley::ValidationError& e) {
    std::cout << "postgres: not linked (" << e.what() << ")\n";
  }
  return 0;
}
