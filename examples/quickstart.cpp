// The first example of the facade: an AI, a conversation, a question and a follow-up.
//   example_quickstart [BASE_URL]    (default http://127.0.0.1:8080/v1, e.g. `parley mock`)
#include <iostream>
#include <string>

#include <parley/ai.hpp>

int main(int argc, char** argv) {
  const std::string baseUrl = argc > 1 ? argv[1] : "http://127.0.0.1:8080/v1";
  parley::AI ai(baseUrl, "YOUR_API_KEY", "your-model");
  ai.setSystemPrompt("You are a helpful assistant.");
  parley::Conversation convo = ai.createConversation();

  std::string reply = convo.ask("Hello, who are you?");
  if (reply.empty()) {
    std::cerr << "error: " << convo.lastError() << "\n";
    return 1;
  }
  std::cout << reply << "\n";
  std::string followUp = convo.ask("Can you summarize your abilities?");
  std::cout << followUp << "\n";

  parley::Conversation branch = convo.duplicate();  // a fork: shares the history, evolves alone
  branch.ask("Something only the branch hears.");
  std::cout << "turns: " << convo.getConversationList().size() / 2 << " (branch "
            << branch.getConversationList().size() / 2
            << "), tokens: " << convo.getTotalTokensUsed() << "\n";
  return 0;
}
