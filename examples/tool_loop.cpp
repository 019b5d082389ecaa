// A ConversationManager with a tool: the model asks for the weather, the tool answers, the
// model replies.
//   example_tool_loop [BASE_URL]    (default http://127.0.0.1:8080/v1, e.g. `parley mock`)
#include <iostream>

#include <parley/parley.hpp>

int main(int argc, char** argv) {
  parley::ClientOptions client;  // plain struct, documented defaults
  client.baseUrl = argc > 1 ? argv[1] : "http://127.0.0.1:8080/v1";
  client.apiKey = "sk-...";
  client.model = "gpt-4o-mini";
  auto tools = std::make_shared<parley::ToolRegistry>();
  tools->add(
      "get_weather", "Current weather for a city",
      nlohmann::json::parse(
          R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"),
      [](const nlohmann::json& args, parley::ToolContext&) -> nlohmann::json {
        return {{"city", args["city"]}, {"tempC", -3}};
      });
  parley::ConversationOptions options;
  options.llm = std::make_shared<parley::OpenAiClient>(client);
  options.tools = tools;
  options.systemPrompt = "You are terse.";
  options.maxIterations = 10;
  options.stream = true;
  parley::ConversationManager conversation(options);
  try {
    parley::RunResult result = conversation.run("What is the weather in Oslo?");
    std::cout << result.content << "\n"
              << "finish: " << result.finishReason << ", iterations: " << result.iterations
              << ", messages: " << conversation.getMessageCount() << "\n";
  } catch (const parley::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
