// Counts the prompt tokens of a small chat request before sending it, as the API will report
// them, and shows what happens without a vocabulary (an estimate, flagged as such).
#include <iostream>

#include <parley/parley.hpp>

int main() {
  parley::TokenCounter counter("o200k_base");  // loads once per process; share it
  std::vector<parley::Message> messages = {
      parley::Message::system("You are a terse assistant."),
      parley::Message::user("How many tokens is this question?"),
  };
  nlohmann::json tools = nlohmann::json::parse(R"([{"type": "function", "function": {
      "name": "get_time", "description": "Current time in a time zone",
      "parameters": {"type": "object", "properties": {
        "tz": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}}}}}])");

  parley::TokenCount prompt = parley::countChatTokens(messages, tools, counter);
  std::cout << "prompt tokens: " << prompt.tokens << (prompt.estimate ? " (estimate)" : "") << "\n";

  if (counter.exact()) {
    std::vector<parley::TokenId> ids = counter.encoding()->encode("Hello, world!");
    std::cout << "\"Hello, world!\" is " << ids.size() << " tokens and decodes back to \""
              << counter.encoding()->decode(ids) << "\"\n";
  }
  return 0;
}
