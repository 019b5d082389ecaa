// Two threads of a workflow driven through the executor's events.
// Run `parley mock` (or any OpenAI-compatible server) and pass its base URL:
//   example_event_executor http://127.0.0.1:8080/v1
#include <iostream>
#include <map>
#include <mutex>

#include <parley/parley.hpp>

int main(int argc, char** argv) {
  parley::ClientOptions clientOptions;
  clientOptions.baseUrl = argc > 1 ? argv[1] : "http://127.0.0.1:8080/v1";
  clientOptions.model = "parley-mock";

  parley::EventBus bus;
  auto profiles = std::make_shared<parley::ProfileRegistry>();
  profiles->add("default", clientOptions);
  auto tools = std::make_shared<parley::ToolRegistry>();
  tools->add(
      "get_weather", "Current weather for a city",
      nlohmann::json::parse(
          R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"),
      [](const nlohmann::json& args, parley::ToolContext&) -> nlohmann::json {
        return args.at("city").get<std::string>() + ": 18C, sunny";
      });

  parley::ExecutorOptions options;
  options.profiles = profiles;
  options.tools = tools;                       // answered by the executor's default ToolWorker
  parley::LlmExecutor executor(bus, options);  // subscribes now, unsubscribes when destroyed

  std::mutex mutex;
  std::map<std::string, std::string> answers;  // by thread: handlers run on the executor's pool
  auto done =
      bus.subscribe<parley::LlmExecutionCompleted>([&](const parley::LlmExecutionCompleted& e) {
        std::lock_guard lock(mutex);
        answers[e.threadId] += e.result.content + " (" +
                               std::to_string(e.updatedContext.messages().size()) + " messages) ";
      });
  auto failed = bus.subscribe<parley::LlmExecutionFailed>([&](const parley::LlmExecutionFailed& e) {
    std::lock_guard lock(mutex);
    answers[e.threadId] += "failed: " + e.error + " ";
  });
  auto toolCalls =
      bus.subscribe<parley::ToolExecutionRequest>([&](const parley::ToolExecutionRequest& e) {
        std::lock_guard lock(mutex);
        answers[e.threadId] += "[tool " + e.toolCall.name + "] ";
      });

  auto request = [](std::string thread, std::string prompt) {
    parley::LlmExecutionRequest r;
    r.workflowId = "wf-1";
    r.threadId = std::move(thread);
    r.nodeId = "llm-1";
    r.requestData.prompt = std::move(prompt);
    r.requestData.profileId = "default";
    return r;
  };
  // The two threads run concurrently; each thread's requests run in order.
  bus.publish(request("thread-1", "What is the weather in Paris?"));
  bus.publish(request("thread-2", "Hello"));
  bus.publish(request("thread-2", "Still there?"));
  executor.waitIdle();

  // Or the direct API, which waits for the completion:
  parley::LlmExecutionResult result = executor.execute(request("thread-1", "Thanks"));

  for (const auto& [thread, text] : answers)
    std::cout << thread << ": " << text << "\n";
  std::cout << "direct: " << result.content << "\n";
  return 0;
}
