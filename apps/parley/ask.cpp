// `parley ask`: one prompt, one turn, the reply on stdout.
//
// The endpoint comes from --profile (a [profiles.NAME] table of the config file), else from
// --base-url / OPENAI_BASE_URL; --base-url, --model and --api-key override a profile's values.
// The key defaults to OPENAI_API_KEY. With tools (--tools demo, --tools-file FILE) the turn is
// ConversationManager::run's tool loop (at most --max-iterations model calls; tool activity on
// stderr); without tools it is one model call and tool calls the model makes are printed, not
// run. --db/--thread continue a stored thread and save the turn when it completes.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli_store.hpp"
#include "commands.hpp"
#include "demo_tools.hpp"
#include "endpoint.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/store.hpp"
#include "terminal.hpp"
#include "tool_file.hpp"

namespace parley::cli {
namespace {

struct AskArgs {
  EndpointArgs endpoint;
  bool stream = true;
  int maxIterations = 10;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::string system;
  std::string db;
  std::string thread;
  bool threadGiven = false;
  int64_t timeoutMs = -1;
  bool json = false;
  std::string prompt;
};

std::atomic<bool> interrupted{false};

void onSigint(int) {
  interrupted.store(true);
}

std::string oneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

int runAsk(const AskArgs& args) {
  // Without tools a turn is one model call, within any bound of at least 1: scripts pass
  // --max-iterations whether or not they offer tools.
  if (args.maxIterations < 1) throw ValidationError("--max-iterations", "must be at least 1");
  if (args.threadGiven && args.thread.empty()) {
    throw ValidationError("--thread", "needs a thread id (leave --thread out to start a new one)");
  }
  auto tools = makeToolRegistry(args.toolSets, args.toolFiles);
  const bool loop = tools->size() > 0;

  ConversationOptions options;
  options.llm = std::make_shared<OpenAiClient>(resolveEndpoint(args.endpoint));
  if (loop) options.tools = tools;
  options.systemPrompt = args.system;
  options.stream = args.stream;
  options.maxIterations = args.maxIterations;
  ConversationManager manager(options);

  // --db and/or --thread: continue (or start) a stored thread; the turn is saved only when it
  // completes, in one transaction, so the thread only ever holds whole turns.
  std::optional<StoredThread> stored;
  bool resumed = false;
  if (!args.db.empty() || !args.thread.empty()) {
    auto store = openCliStore(args.db);
    std::string id = args.thread;
    if (id.empty()) id = store->createThread({}, manager.getAllMessages(), nullptr).id;
    stored.emplace(std::move(store), id);
    resumed = stored->attach(manager) && !args.thread.empty();
    if (resumed && !args.system.empty()) {
      auto first = manager.getMessages();
      if (first.empty() || first.front().role != Role::System ||
          first.front().content != args.system) {
        std::cerr << "parley: note: --system is ignored: thread " << id
                  << " already exists and keeps its own system prompt\n";
      }
    }
  }

  RunOptions run;
  if (args.timeoutMs > 0) run.timeout = std::chrono::milliseconds(args.timeoutMs);
  bool printedText = false;
  bool atLineStart = true;
  TerminalFilter toStdout(STDOUT_FILENO);
  run.onChunk = [&](const StreamDelta& delta) {
    if (!args.json && !delta.content.empty()) {
      std::cout << toStdout(delta.content) << std::flush;
      printedText = true;
      atLineStart = delta.content.back() == '\n';
    }
    return true;
  };
  run.onToolCall = [&](const ToolCall& call) {
    if (!atLineStart) std::cout << "\n" << std::flush;
    atLineStart = true;
    if (!args.json) std::cerr << toolCallLine(call, STDERR_FILENO) << "\n";
  };
  run.onToolResult = [&](const ToolResult& result) {
    if (!args.json) std::cerr << toolResultLine(result, STDERR_FILENO) << "\n";
  };

  // Ctrl-C cancels the call: the handler only sets a flag, a watcher turns it into a stop.
  std::stop_source stop;
  run.stopToken = stop.get_token();
  interrupted.store(false);
  auto previous = std::signal(SIGINT, onSigint);
  std::jthread watcher([&stop](std::stop_token done) {
    while (!done.stop_requested()) {
      if (interrupted.load()) {
        stop.request_stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  Message reply;
  std::string finishReason;
  std::optional<TokenUsage> usage;
  try {
    if (loop) {
      RunResult result = manager.run(args.prompt, run);
      reply = result.message;
      finishReason = result.finishReason;
      usage = result.usage;
    } else {
      // No tools: one model call; tool calls the model makes anyway are printed, not run.
      manager.addMessage(Message::user(args.prompt));
      ChatResult result = manager.executeLlmCall(run);
      reply = result.message;
      finishReason = result.finishReason;
      usage = result.usage;
    }
    if (stored) stored->save(manager);
  } catch (const CancelledError&) {
    std::signal(SIGINT, previous);
    if (printedText) std::cout << "\n";
    std::cerr << "parley: interrupted\n";
    return kExitInterrupted;
  } catch (const Error& e) {
    std::signal(SIGINT, previous);
    if (printedText) std::cout << "\n";
    std::cerr << "parley: error: " << forTerminal(oneLine(e.what()), STDERR_FILENO) << "\n";
    return dynamic_cast<const ValidationError*>(&e) ? kExitUsage : kExitFailure;
  }
  std::signal(SIGINT, previous);
  // After the reply, so a terminal shows the note on a line of its own.
  const auto noteNewThread = [&] {
    if (!stored || !args.thread.empty()) return;
    std::cout << std::flush;
    std::cerr << "parley: saved as thread " << stored->threadId() << "\n";
  };

  if (args.json) {
    reply.usage.reset();  // printed beside it, as the API's response has it
    nlohmann::json out = {{"message", toJson(reply)},
                          {"finish_reason", finishReason},
                          {"usage", usage ? toJson(*usage) : nlohmann::json()}};
    std::cout << out.dump() << "\n";
    noteNewThread();
    return kExitOk;
  }
  if (!args.stream) std::cout << toStdout(reply.content);
  if (!reply.content.empty() && (!args.stream || !atLineStart)) std::cout << "\n";
  if (!loop) {
    for (const ToolCall& call : reply.toolCalls) {
      std::cout << toStdout("tool call (not executed): " + call.name + " " + call.arguments + " [" +
                            call.id + "]\n");
    }
  }
  noteNewThread();
  if (finishReason == "max_iterations") {
    std::cerr << "parley: stopped after " << args.maxIterations
              << " model calls (--max-iterations)\n";
  }
  return kExitOk;
}

}  // namespace

void addAskCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<AskArgs>();
  CLI::App* cmd = app.add_subcommand("ask", "Send one prompt to a model and print the reply");
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_flag("--stream,!--no-stream", args->stream,
                "Stream the reply as it is generated (default) or wait for all of it");
  cmd->add_option("--max-iterations", args->maxIterations,
                  "Model calls allowed in one turn (the tool loop; without tools a turn is one "
                  "call)")
      ->capture_default_str();
  cmd->add_option("--tools", args->toolSets,
                  "Offer a built-in tool set: demo (calculate, get_time, get_weather)");
  cmd->add_option("--tools-file", args->toolFiles,
                  "Offer the tools of a TOML file ([[tool]] name, description, command, "
                  "parameters, timeout_ms; see the README)");
  cmd->add_option("--system", args->system, "System prompt of a new conversation");
  cmd->add_option("--db", args->db,
                  "Conversation store: FILE, sqlite://FILE or postgresql://... (default with "
                  "--thread: $XDG_DATA_HOME/parley/parley.db)");
  cmd->add_option("--thread", args->thread,
                  "Continue (or start) this stored thread and save the turn to it");
  cmd->add_option("--timeout", args->timeoutMs, "Bound the whole call, retries included, in ms");
  cmd->add_flag("--json", args->json,
                "Print one JSON object: {\"message\", \"finish_reason\", \"usage\"}");
  cmd->add_option("prompt", args->prompt, "The prompt")->required();
  cmd->callback([args, cmd, &exitCode] {
    args->threadGiven = cmd->get_option("--thread")->count() > 0;
    exitCode = runAsk(*args);
  });
}

}  // namespace parley::cli
