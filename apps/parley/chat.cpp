// `parley chat`: an interactive conversation with streaming, tools, forks and persistence.
//
// On a terminal it reads lines with libedit (editing, input history); otherwise it reads plain
// lines from stdin, so scripts and tests can pipe a session in. Each turn is
// ConversationManager::run; the conversation is saved to the store after every change, so the
// thread only ever holds whole turns. Ctrl-C during a reply cancels it and puts the conversation
// back as it was before the prompt; Ctrl-D or /quit ends the session.
//
// With no endpoint configured at all (no --base-url/--profile/--api-key, no OPENAI_BASE_URL or
// OPENAI_API_KEY) it starts the mock's demo agent in-process and offers the demo tools, so a
// newcomer sees streaming and tool calls offline.
#include <editline/readline.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_store.hpp"
#include "commands.hpp"
#include "endpoint.hpp"
#include "mock/mock_server.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/store.hpp"
#include "terminal.hpp"
#include "tool_file.hpp"

namespace parley::cli {
namespace {

struct ChatArgs {
  EndpointArgs endpoint;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::string system;
  std::string db;
  std::string thread;
  bool threadGiven = false;
  int maxIterations = 10;
  int64_t tokenLimit = 0;
  bool jsonMode = false;
  bool stream = true;
};

std::atomic<bool> chatInterrupted{false};

void onChatSigint(int) {
  chatInterrupted.store(true);
}

constexpr const char* kHelp =
    "Commands:\n"
    "  /help                 this list\n"
    "  /history              the visible messages\n"
    "  /usage                tokens: last call, total, the context against the limit\n"
    "  /system TEXT          set the system prompt\n"
    "  /model NAME           use another model from the next reply on\n"
    "  /fork [NAME]          copy this conversation into a new branch and switch to it\n"
    "  /branches             list the branches\n"
    "  /switch NAME          continue another branch\n"
    "  /truncate JSON        e.g. /truncate {\"keepLast\": 4}  (context operation)\n"
    "  /filter JSON          e.g. /filter {\"roles\": [\"user\"]}  (context operation)\n"
    "  /undo                 roll back the last context operation\n"
    "  /clear                clear the context (keeps the system prompt)\n"
    "  /save FILE            write the conversation as a snapshot JSON file\n"
    "  /load FILE            load a snapshot file as a new branch\n"
    "  /quit                 end the session (so does Ctrl-D)\n"
    "Ctrl-C during a reply cancels it.\n";

std::string oneLine(std::string text, size_t max = 200) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (text.size() > max) text = text.substr(0, max) + "...";
  return text;
}

class ChatSession {
 public:
  ChatSession(const ChatArgs& args, std::ostream& out) : args_(args), out_(out) {}

  int run() {
    if (args_.threadGiven && args_.thread.empty()) {
      throw ValidationError("--thread",
                            "needs a thread id (leave --thread out to start a new one)");
    }
    interactive_ = ::isatty(STDIN_FILENO) != 0;
    std::string intro;
    ClientOptions client;
    std::vector<std::string> toolSets = args_.toolSets;
    if (!endpointConfigured(args_.endpoint)) {
      mock_ = std::make_unique<mock::MockServer>(mock::MockOptions{});
      mock_->start();
      EndpointArgs local = args_.endpoint;
      local.baseUrl = mock_->baseUrl();
      client = resolveEndpoint(local);
      if (toolSets.empty() && args_.toolFiles.empty()) toolSets.push_back("demo");
      intro = "parley chat: no endpoint configured, talking to the built-in mock's demo agent at " +
              mock_->baseUrl() + " (offline; try \"weather in Paris\" or \"what is 6 * 7\")";
    } else {
      client = resolveEndpoint(args_.endpoint);
      intro = "parley chat: model " + client.model + " at " + redactUrl(client.baseUrl);
    }
    ConversationOptions options;
    options.llm = std::make_shared<OpenAiClient>(client);
    auto tools = makeToolRegistry(toolSets, args_.toolFiles);
    if (tools->size() > 0) options.tools = tools;
    options.systemPrompt = args_.system;
    options.stream = args_.stream;
    options.maxIterations = args_.maxIterations;
    options.tokenLimit = args_.tokenLimit;
    if (args_.jsonMode) options.request.responseFormat = ResponseFormat::jsonObject();
    if (args_.maxIterations < 1) throw ValidationError("--max-iterations", "must be at least 1");
    if (args_.tokenLimit < 0) throw ValidationError("--token-limit", "must be >= 0");

    store_ = openCliStore(args_.db);
    ConversationManager manager(options);
    std::string id = args_.thread;
    if (id.empty()) id = store_->createThread({}, manager.getAllMessages(), nullptr).id;
    auto stored = std::make_shared<StoredThread>(store_, id);
    const bool resumed = stored->attach(manager) && !args_.thread.empty();
    branches_.emplace("main", Branch{std::move(manager), std::move(stored)});
    out_ << intro << "\n"
         << "thread " << id << (resumed ? " (resumed)" : " (new)")
         << (tools->size() ? "; tools: " + joinNames(tools->names()) : std::string())
         << "; /help for commands\n"
         << std::flush;

    for (;;) {
      std::optional<std::string> line = readLine();
      if (!line) break;  // Ctrl-D / end of input
      if (line->empty()) continue;
      try {
        if ((*line)[0] == '/') {
          if (!command(*line)) break;
        } else {
          turn(*line);
        }
      } catch (const ValidationError& e) {
        out_ << "error: " << forTerminal(e.what(), STDOUT_FILENO) << "\n";
      } catch (const Error& e) {
        out_ << "error: " << forTerminal(oneLine(e.what(), 400), STDOUT_FILENO) << "\n";
      }
      out_ << std::flush;
    }
    if (mock_) mock_->stop();
    return kExitOk;
  }

 private:
  struct Branch {
    ConversationManager manager;
    std::shared_ptr<StoredThread> thread;
  };

  static std::string joinNames(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names)
      text += (text.empty() ? "" : ", ") + n;
    return text;
  }

  Branch& current() { return branches_.at(current_); }

  std::optional<std::string> readLine() {
    if (interactive_) {
      const std::string prompt = (current_ == "main" ? "" : current_ + " ") + "> ";
      char* raw = ::readline(prompt.c_str());
      if (!raw) {
        out_ << "\n";
        return std::nullopt;
      }
      std::string line(raw);
      std::free(raw);
      if (!line.empty()) ::add_history(line.c_str());
      return line;
    }
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }

  void save() { current().thread->save(current().manager); }

  void turn(const std::string& prompt) {
    Branch& branch = current();
    // The way back if the reply is cancelled or fails: run() keeps complete iterations, but a
    // chat turn is all or nothing.
    ConversationManager before = branch.manager.clone();
    RunOptions run;
    if (!model_.empty()) {
      ChatRequest request = branch.manager.options().request;
      request.model = model_;
      run.request = request;
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> firstToken;
    bool waiting = interactive_;
    bool atLineStart = true;
    TerminalFilter toTerminal(STDOUT_FILENO);
    auto stopWaiting = [&] {
      if (waiting) out_ << "\r   \r";
      waiting = false;
    };
    run.onChunk = [&](const StreamDelta& delta) {
      if (delta.content.empty()) return true;
      if (!firstToken) firstToken = std::chrono::steady_clock::now();
      stopWaiting();
      out_ << toTerminal(delta.content) << std::flush;
      atLineStart = delta.content.back() == '\n';
      return true;
    };
    run.onToolCall = [&](const ToolCall& call) {
      stopWaiting();
      if (!atLineStart) out_ << "\n";
      atLineStart = true;
      out_ << toolCallLine(call, STDOUT_FILENO) << "\n" << std::flush;
    };
    run.onToolResult = [&](const ToolResult& result) {
      out_ << toolResultLine(result, STDOUT_FILENO) << "\n" << std::flush;
    };

    std::stop_source stop;
    run.stopToken = stop.get_token();
    chatInterrupted.store(false);
    auto previous = std::signal(SIGINT, onChatSigint);
    std::jthread watcher([&stop](std::stop_token done) {
      while (!done.stop_requested()) {
        if (chatInterrupted.load()) {
          stop.request_stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    // The waiting indicator, until the first token; shown once Ctrl-C is handled.
    if (waiting) out_ << "..." << std::flush;
    RunResult result;
    try {
      result = branch.manager.run(prompt, run);
    } catch (const CancelledError&) {
      std::signal(SIGINT, previous);
      stopWaiting();
      branch.manager = std::move(before);
      out_ << (atLineStart ? "" : "\n") << "[cancelled; the conversation is as before]\n";
      return;
    } catch (...) {
      std::signal(SIGINT, previous);
      stopWaiting();
      branch.manager = std::move(before);
      if (!atLineStart) out_ << "\n";
      throw;
    }
    std::signal(SIGINT, previous);
    stopWaiting();
    if (!args_.stream) out_ << toTerminal(result.content);
    if (!result.content.empty() && (!args_.stream || !atLineStart)) out_ << "\n";
    save();

    const auto end = std::chrono::steady_clock::now();
    out_ << "[" << result.usage.promptTokens << " prompt + " << result.usage.completionTokens
         << " completion = " << result.usage.totalTokens << " tokens";
    if (result.iterations > 1) out_ << " over " << result.iterations << " calls";
    if (firstToken && result.usage.completionTokens > 0 && end > *firstToken) {
      const double seconds = std::chrono::duration<double>(end - *firstToken).count();
      out_ << ", " << std::fixed << std::setprecision(0)
           << static_cast<double>(result.usage.completionTokens) / seconds << " tok/s"
           << std::defaultfloat;
    }
    if (result.finishReason == "max_iterations") out_ << "; stopped at --max-iterations";
    out_ << "]\n";
    (void)start;
  }

  void applyOperation(const std::string& name, const std::string& argument) {
    nlohmann::json config;
    try {
      config = parseJson(argument.empty() ? "{}" : argument);
    } catch (const ProtocolError&) {
      throw ValidationError("/" + name, "expects a JSON object, e.g. /truncate {\"keepLast\": 4}");
    }
    ContextOperationResult result = applyContextOperation(
        current().manager, parseContextOperation({{"operation", name}, {name, config}}));
    save();
    out_ << name << ": " << result.messageCount << " messages visible";
    if (result.removedForPairing) {
      out_ << " (" << result.removedForPairing << " dropped to keep tool calls paired)";
    }
    out_ << "\n";
  }

  void addBranch(const std::string& name, ConversationManager manager,
                 std::shared_ptr<StoredThread> thread) {
    branches_.emplace(name, Branch{std::move(manager), std::move(thread)});
    current_ = name;
  }

  std::string freshName(const std::string& stem) {
    for (int i = 1;; ++i) {
      std::string name = stem + "-" + std::to_string(i);
      if (!branches_.count(name)) return name;
    }
  }

  // Returns false to end the session.
  bool command(const std::string& line) {
    const size_t space = line.find(' ');
    const std::string name =
        line.substr(1, space == std::string::npos ? std::string::npos : space - 1);
    std::string argument = space == std::string::npos ? "" : line.substr(space + 1);
    while (!argument.empty() && argument.back() == ' ')
      argument.pop_back();
    ConversationManager& manager = current().manager;

    if (name == "quit" || name == "exit") return false;
    if (name == "help") {
      out_ << kHelp;
    } else if (name == "history") {
      const auto messages = manager.getMessages();
      for (size_t i = 0; i < messages.size(); ++i) {
        const Message& m = messages[i];
        std::string line = "[" + std::to_string(i) + "] " + std::string(toString(m.role)) + ": " +
                           oneLine(m.content);
        for (const ToolCall& call : m.toolCalls)
          line += " <call " + call.name + " " + oneLine(call.arguments) + ">";
        out_ << forTerminal(line, STDOUT_FILENO) << "\n";
      }
    } else if (name == "usage") {
      const TokenUsageStats usage = manager.getTokenUsage();
      if (usage.lastRequest) {
        out_ << "last call: " << usage.lastRequest->promptTokens << " prompt, "
             << usage.lastRequest->completionTokens << " completion, "
             << usage.lastRequest->totalTokens << " total\n";
      }
      out_ << "all calls: " << usage.cumulative.promptTokens << " prompt, "
           << usage.cumulative.completionTokens << " completion, " << usage.cumulative.totalTokens
           << " total over " << usage.requests << " calls\n"
           << "context: " << usage.context.contextTokens
           << (usage.context.estimated ? " (est.)" : "") << " of "
           << (usage.context.tokenLimit > 0 ? std::to_string(usage.context.tokenLimit)
                                            : std::string("no limit"))
           << "\n";
    } else if (name == "system") {
      if (argument.empty()) throw ValidationError("/system", "give the prompt: /system TEXT");
      const auto view = manager.getMessages();
      ContextOperation op;
      if (!view.empty() && view.front().role == Role::System) {
        op = ReplaceOp{0, Message::system(argument)};
      } else {
        op = InsertOp{0, {Message::system(argument)}};
      }
      applyContextOperation(manager, op);
      save();
      out_ << "system prompt set\n";
    } else if (name == "model") {
      if (argument.empty()) throw ValidationError("/model", "give a model name: /model NAME");
      model_ = argument;
      out_ << "model: " << model_ << "\n";
    } else if (name == "fork") {
      const std::string branchName = argument.empty() ? freshName("fork") : argument;
      if (branches_.count(branchName)) {
        throw ValidationError("/fork", "a branch named \"" + branchName + "\" exists");
      }
      std::shared_ptr<StoredThread> thread = current().thread->fork(manager);
      const std::string threadId = thread->threadId();
      addBranch(branchName, manager.clone(), std::move(thread));
      out_ << "forked: now on " << branchName << " (thread " << threadId << ")\n";
    } else if (name == "branches") {
      for (const auto& [branchName, branch] : branches_) {
        out_ << (branchName == current_ ? "* " : "  ") << branchName << "  thread "
             << branch.thread->threadId() << ", " << branch.manager.getMessageCount()
             << " messages\n";
      }
    } else if (name == "switch") {
      if (!branches_.count(argument)) {
        throw ValidationError("/switch", "no branch \"" + argument + "\" (see /branches)");
      }
      current_ = argument;
      out_ << "now on " << current_ << "\n";
    } else if (name == "truncate" || name == "filter") {
      applyOperation(name, argument);
    } else if (name == "undo") {
      const size_t batch = manager.getMarkMap().currentBatch;
      if (batch == 0) {
        out_ << "nothing to undo\n";
      } else {
        manager.rollbackToBatch(batch - 1);
        save();
        out_ << "undone: " << manager.getMessageCount() << " messages visible\n";
      }
    } else if (name == "clear") {
      manager.clearMessages(true);
      save();
      out_ << "cleared: " << manager.getMessageCount() << " messages visible\n";
    } else if (name == "save") {
      if (argument.empty()) throw ValidationError("/save", "give a file: /save FILE");
      std::ofstream file(argument, std::ios::binary);
      file << manager.createSnapshot().dump(2) << "\n";
      if (!file) throw ValidationError(argument, "cannot write the file");
      out_ << "saved to " << argument << "\n";
    } else if (name == "load") {
      if (argument.empty()) throw ValidationError("/load", "give a file: /load FILE");
      std::ifstream file(argument, std::ios::binary);
      if (!file) throw ValidationError(argument, "cannot read the file");
      std::ostringstream text;
      text << file.rdbuf();
      nlohmann::json snapshot;
      try {
        snapshot = parseJson(text.str());
      } catch (const ProtocolError& e) {
        throw ValidationError(argument, e.what());
      }
      ConversationManager loaded(manager.options());
      loaded.restoreFromSnapshot(snapshot);
      const ThreadInfo info = store_->importThread(snapshot);
      auto thread = std::make_shared<StoredThread>(store_, info.id);
      thread->attach(loaded);
      const std::string branchName = freshName("loaded");
      addBranch(branchName, std::move(loaded), std::move(thread));
      out_ << "loaded " << argument << " as branch " << branchName << " (thread " << info.id
           << ")\n";
    } else {
      throw ValidationError("/" + name, "unknown command (try /help)");
    }
    return true;
  }

  const ChatArgs& args_;
  std::ostream& out_;
  bool interactive_ = false;
  std::unique_ptr<mock::MockServer> mock_;
  std::shared_ptr<ConversationStore> store_;
  std::map<std::string, Branch> branches_;
  std::string current_ = "main";
  std::string model_;
};

}  // namespace

void addChatCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Talk with a model interactively: streaming, tools, forks, persistence");
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_option("--tools", args->toolSets,
                  "Offer a built-in tool set: demo (calculate, get_time, get_weather)");
  cmd->add_option("--tools-file", args->toolFiles, "Offer the tools of a TOML file");
  cmd->footer(std::string("\nIn the session:\n") + kHelp +
              "Ctrl-C at the prompt ends the session; everything is already saved.");
  cmd->add_option("--system", args->system, "System prompt of a new conversation");
  cmd->add_option("--db", args->db,
                  "Conversation store: FILE, sqlite://FILE or postgresql://... (default: "
                  "$XDG_DATA_HOME/parley/parley.db, else ~/.local/share/parley/parley.db)");
  cmd->add_option("--thread", args->thread, "Resume this stored thread (default: a new one)");
  cmd->add_option("--max-iterations", args->maxIterations, "Model calls allowed in one turn")
      ->capture_default_str();
  cmd->add_option("--token-limit", args->tokenLimit, "Context limit shown by /usage (0: none)")
      ->capture_default_str();
  cmd->add_flag("--json-mode", args->jsonMode, "Ask for JSON object replies (response_format)");
  cmd->add_flag("--stream,!--no-stream", args->stream,
                "Stream replies as they are generated (default) or print them whole");
  cmd->callback([args, cmd, &exitCode] {
    args->threadGiven = cmd->get_option("--thread")->count() > 0;
    ChatSession session(*args, std::cout);
    exitCode = session.run();
  });
}

}  // namespace parley::cli
