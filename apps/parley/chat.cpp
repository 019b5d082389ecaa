// `parley chat`: an interactive conversation with streaming, tools, forks and persistence.
// Over 600 lines because the session's slash commands share its state (branches, the store,
// the renderer); the line editor, Markdown, templates and prompt input are files of their own.
//
// On a terminal it reads lines with libedit (editing, input history); otherwise it reads plain
// lines from stdin, so scripts and tests can pipe a session in. Each turn is
// ConversationManager::run; the conversation is saved to the store after every change, so the
// thread only ever holds whole turns. Ctrl-C during a reply cancels it and puts the conversation
// back as it was before the prompt; Ctrl-D, /quit or a bare `exit` or `quit` ends the session.
// A line that is only `"""` starts a multi-line prompt that runs to the next such line; a paste
// of several lines is one prompt too (bracketed_paste.hpp).
//
// With no endpoint configured at all (no --base-url/--profile/--api-key, no OPENAI_BASE_URL or
// OPENAI_API_KEY) it starts the mock's demo agent in-process and offers the demo tools, so a
// newcomer sees streaming and tool calls offline.
#include <editline/readline.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <clocale>
#include <condition_variable>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bracketed_paste.hpp"
#include "cli_store.hpp"
#include "commands.hpp"
#include "endpoint.hpp"
#include "markdown.hpp"
#include "mcp_config.hpp"
#include "mock/mock_server.hpp"
#include "parley/command_tools.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/prompt_counter.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "prices_option.hpp"
#include "prompt_input.hpp"
#include "template_config.hpp"
#include "terminal.hpp"
#include "tool_file.hpp"

namespace parley::cli {
namespace {

struct ChatArgs {
  EndpointArgs endpoint;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::vector<std::string> mcpServers;
  std::string system;
  std::string db;
  std::string thread;
  bool continueLast = false;
  bool threadGiven = false;
  int maxIterations = 10;
  int64_t tokenLimit = 0;
  bool jsonMode = false;
  bool stream = true;
  std::string templateName;
  std::string saveTemplateName;
  std::string format;  // text | markdown; "": text on a terminal, else markdown
  std::string color = "auto";
  std::string pricesFile;
};

std::atomic<bool> chatInterrupted{false};

void onChatSigint(int) {
  chatInterrupted.store(true);
}

sigjmp_buf promptJump;
volatile sig_atomic_t promptJumpArmed = 0;

void onPromptSigint(int) {
  if (promptJumpArmed) siglongjmp(promptJump, 1);
}

constexpr const char* kHelp =
    "Commands:\n"
    "  /help                 this list\n"
    "  /history              the visible messages\n"
    "  /usage                tokens: last call, total, the context against the limit\n"
    "  /cost                 what this session's replies cost (--prices)\n"
    "  /system TEXT          set the system prompt\n"
    "  /model NAME           use another model from the next reply on\n"
    "  /set KEY [VALUE]      model, temperature, top_p, max_tokens or seed (no value: default)\n"
    "  /show settings        the request settings in use\n"
    "  /template NAME        use a [templates.NAME] table: system prompt, model, settings, prompt\n"
    "  /regenerate           redo the last reply on a new branch (the old one stays)\n"
    "  /edit [N] [TEXT]      prompt N (see /history) changed, on a new branch; no N: the editor\n"
    "  /continue [TEXT]      ask the model to go on\n"
    "  /fork [NAME]          copy this conversation into a new branch and switch to it\n"
    "  /branches             list the branches\n"
    "  /switch NAME          continue another branch\n"
    "  /truncate JSON        e.g. /truncate {\"keepLast\": 4}  (context operation)\n"
    "  /filter JSON          e.g. /filter {\"roles\": [\"user\"]}  (context operation)\n"
    "                        either with --dry-run at the end: what it would cost the prompt\n"
    "                        cache and save, nothing changed\n"
    "  /undo                 roll back the last context operation\n"
    "  /clear                clear the context (keeps the system prompt)\n"
    "  /save FILE            write the conversation as a snapshot JSON file\n"
    "  /load FILE            load a snapshot file as a new branch\n"
    "  /file PATH [PROMPT]   send a file's (or a directory's) text, after PROMPT if given\n"
    "  /attach FILE          send an image, audio or document with the next prompt\n"
    "  /copy [FILE]          the last reply to the clipboard (wl-copy, xclip, xsel, pbcopy) or "
    "FILE\n"
    "  /quit                 end the session (so do exit, quit and Ctrl-D)\n"
    "  \"\"\"                   on a line of its own: starts and ends a multi-line prompt\n"
    "Tab completes commands and branch names; prompts are remembered across sessions.\n"
    "Ctrl-C during a reply cancels it.\n";

// The details a usage carries, in the one meaning every protocol reports (docs/protocols.md):
// " (N cached, N cache writes, N reasoning)", the zeros left out; "" when all are.
std::string usageDetails(const TokenUsage& usage) {
  std::string out;
  auto add = [&](const char* group, const char* key, const char* label) {
    const auto& raw = usage.raw;
    if (!raw.is_object() || !raw.contains(group) || !raw[group].is_object()) return;
    const auto& value = raw[group].value(key, nlohmann::json());
    if (!value.is_number_integer() || value.get<int64_t>() == 0) return;
    out += (out.empty() ? " (" : ", ") + std::to_string(value.get<int64_t>()) + " " + label;
  };
  add("prompt_tokens_details", "cached_tokens", "cached");
  add("prompt_tokens_details", "cache_creation_tokens", "cache writes");
  add("completion_tokens_details", "reasoning_tokens", "reasoning");
  return out.empty() ? out : out + ")";
}

// Reasoning is shown folded to one line ("[reasoning] first words... (N chars)"), dimmed on a
// terminal: it is there to glance at, not to read through while the answer streams.
std::string foldedReasoning(const std::string& text, bool dim) {
  // A cut preview already ends in "... (N bytes)".
  std::string line = "[reasoning] " + preview(text, 100);
  if (text.size() <= 100) line += " (" + std::to_string(text.size()) + " chars)";
  return dim ? "\033[2m" + line + "\033[0m" : line;
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
    const std::string format = replyFormat(args_.format, STDOUT_FILENO, "--format");
    if (format == "json") throw ValidationError("--format", "chat shows text or markdown");
    renderReplies_ = format == "text";
    colorReplies_ = colorWanted(args_.color, STDOUT_FILENO);
    // libedit reads multibyte (UTF-8) input only under a UTF-8 character-type locale: the
    // user's, else C.UTF-8 when the environment names none.
    const char* locale = std::setlocale(LC_CTYPE, "");
    if (!locale || std::string(locale) == "C" || std::string(locale) == "POSIX") {
      std::setlocale(LC_CTYPE, "C.UTF-8");
    }
    if (interactive_) {
      installPasteReader();  // before anything makes libedit set itself up (loadHistory does)
      loadHistory();
      completing_ = this;
      rl_attempted_completion_function = complete;
      struct sigaction drop {};
      drop.sa_handler = onPromptSigint;
      sigemptyset(&drop.sa_mask);
      ::sigaction(SIGINT, &drop, nullptr);
    }
    PromptTemplate used;
    const TemplatedOptions templated{&args_.endpoint, &args_.system, &args_.toolSets,
                                     &args_.toolFiles, &args_.mcpServers};
    if (!args_.templateName.empty()) {
      used = readTemplate(configFile(args_.endpoint), args_.templateName);
      applyTemplate(used, templated);
      promptPattern_ = used.prompt;
    }
    if (!args_.saveTemplateName.empty()) {
      saveTemplate(configFile(args_.endpoint), templateOf(args_.saveTemplateName, used, templated));
      out_ << "saved template " << args_.saveTemplateName << " in " << configFile(args_.endpoint)
           << "\n";
    }
    std::string intro;
    ClientOptions client;
    std::vector<std::string> toolSets = args_.toolSets;
    if (!endpointConfigured(args_.endpoint)) {
      mock_ = std::make_unique<mock::MockServer>(mock::MockOptions{});
      mock_->start();
      EndpointArgs local = args_.endpoint;
      local.baseUrl = mock_->baseUrl();
      client = resolveEndpoint(local);
      if (toolSets.empty() && args_.toolFiles.empty() && args_.mcpServers.empty())
        toolSets.push_back("demo");
      intro = "parley chat: no endpoint configured, talking to the built-in mock's demo agent at " +
              mock_->baseUrl() + " (offline; try \"weather in Paris\" or \"what is 6 * 7\")";
    } else {
      client = resolveEndpoint(args_.endpoint);
      intro = "parley chat: model " + client.model + " at " + redactUrl(client.baseUrl);
    }
    addParameters(used, client);
    prices_ = cliPriceTable(args_.pricesFile, configFile(args_.endpoint));
    clientModel_ = client.model;
    ConversationOptions options;
    options.llm = makeClient(client);
    // The profile's token_counting: a remote count for the token limit.
    if (client.tokenCounting != TokenCounting::Local) {
      options.promptCounter = makePromptCounter(client);
    }
    auto tools = makeToolRegistry(toolSets, args_.toolFiles);
    // A server's forms and sampling requests ask the person at the terminal.
    addMcpServers(*tools, args_.mcpServers, configFile(args_.endpoint), out_, &out_,
                  terminalForm(std::cin, out_, mcpTerminal_),
                  modelSampling(options.llm, [this](const McpSamplingRequest& request) {
                    std::lock_guard lock(mcpTerminal_);
                    out_ << "\n[mcp." << request.server << " asks the model] "
                         << preview(request.params["messages"].dump(), 300)
                         << "\n  let the model answer? [y/N] " << std::flush;
                    std::string line;
                    return std::getline(std::cin, line) && (line == "y" || line == "yes");
                  }));
    if (tools->size() > 0) options.tools = tools;
    options.systemPrompt = args_.system;
    options.stream = args_.stream;
    options.maxIterations = args_.maxIterations;
    options.tokenLimit = args_.tokenLimit;
    if (args_.jsonMode) options.request.responseFormat = ResponseFormat::jsonObject();
    if (args_.maxIterations < 1) throw ValidationError("--max-iterations", "must be at least 1");
    if (args_.tokenLimit < 0) throw ValidationError("--token-limit", "must be >= 0");
    if (args_.continueLast && !args_.thread.empty()) {
      throw ValidationError("-c", "resumes the thread used last; it cannot go with --thread");
    }

    store_ = openCliStore(args_.db);
    ConversationManager manager(options);
    std::string id = args_.thread;
    if (args_.continueLast) {
      id = mostRecentThread(*store_);
      if (id.empty()) throw ValidationError("-c", "there is no stored thread to resume");
    }
    if (id.empty()) id = store_->createThread({}, manager.getAllMessages(), nullptr).id;
    auto stored = std::make_shared<StoredThread>(store_, id);
    const bool resumed = stored->attach(manager) && (!args_.thread.empty() || args_.continueLast);
    branches_.emplace("main", Branch{std::move(manager), std::move(stored)});
    if (resumed) restoreBranches(options);
    out_ << intro << "\n"
         << "thread " << id << (resumed ? " (resumed)" : " (new)")
         << (tools->size() ? "; tools: " + joinNames(tools->names()) : std::string())
         << "; /help for commands\n"
         << std::flush;

    for (;;) {
      std::optional<std::string> line = readLine();
      if (!line) break;  // Ctrl-D / end of input
      if (line->empty()) continue;
      if (*line == "exit" || *line == "quit") break;
      if (*line == "\"\"\"") {
        line = readBlock();
        if (!line) break;
        if (line->empty()) continue;
        turnOrError(fillPrompt(promptPattern_, *line));
        continue;
      }
      try {
        if ((*line)[0] == '/') {
          if (!command(*line)) break;
        } else {
          turn(fillPrompt(promptPattern_, *line));
        }
      } catch (const ValidationError& e) {
        out_ << "error: " << forTerminal(e.what(), STDOUT_FILENO) << "\n";
      } catch (const Error& e) {
        out_ << "error: " << forTerminal(preview(e.what(), 400), STDOUT_FILENO) << "\n";
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
    // The batch before each edit of this session, for /undo (an edit may take several batches).
    std::vector<size_t> undo{};
  };

  static std::string joinNames(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names)
      text += (text.empty() ? "" : ", ") + n;
    return text;
  }

  Branch& current() { return branches_.at(current_); }

  std::optional<std::string> readLine(const std::string& continuation = "") {
    if (interactive_) {
      const std::string prompt =
          continuation.empty() ? (current_ == "main" ? "" : current_ + " ") + "> " : continuation;
      // Ctrl-C at the prompt drops the line, as in a shell. libedit retries a read that a
      // signal interrupted, so the handler jumps out of it; the next readline() call sets the
      // terminal up afresh.
      // Between prompts and replies the same handler only ignores Ctrl-C (installed in run()).
      chatInterrupted.store(false);
      if (sigsetjmp(promptJump, 1) != 0) {
        promptJumpArmed = 0;
        disableBracketedPaste(STDOUT_FILENO);
        takePaste();
        chatInterrupted.store(true);
        // The paste reader reads the terminal itself, so the ^C is echoed here, as a shell does.
        out_ << "^C\n" << std::flush;
        return std::string();
      }
      promptJumpArmed = 1;
      enableBracketedPaste(STDOUT_FILENO);
      char* raw = ::readline(prompt.c_str());
      disableBracketedPaste(STDOUT_FILENO);
      promptJumpArmed = 0;
      if (!raw) {
        out_ << "\n";
        return std::nullopt;
      }
      std::string line(raw);
      std::free(raw);
      // A paste of several lines ended the line: it joins what was typed before it, as one
      // prompt, shown as it will be sent.
      if (std::optional<Paste> paste = takePaste()) {
        line += paste->text;
        std::istringstream lines(paste->text);
        for (std::string shown; std::getline(lines, shown);)
          out_ << "... " << forTerminal(shown, STDOUT_FILENO) << "\n";
        if (paste->truncated) {
          out_ << "note: the paste was cut at " << kMaxPasteBytes << " bytes\n";
        }
        out_ << std::flush;
      }
      if (!line.empty()) {
        ::add_history(line.c_str());
        saveHistory();
      }
      return line;
    }
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }

  // The lines up to the closing `"""`, joined; nullopt at end of input (nothing is sent).
  std::optional<std::string> readBlock() {
    std::string text;
    for (;;) {
      std::optional<std::string> line = readLine("... ");
      if (!line) return std::nullopt;
      if (line->empty() && chatInterrupted.load()) return std::string();  // Ctrl-C: drop it
      if (*line == "\"\"\"") return text;
      if (!text.empty()) text += "\n";
      text += *line;
    }
  }

  void turnOrError(const std::string& prompt) {
    try {
      turn(prompt);
    } catch (const Error& e) {
      out_ << "error: " << preview(e.what(), 400) << "\n";
    }
    out_ << std::flush;
  }

  void save() { current().thread->save(current().manager); }

  // --- the prompt's line editor: history across sessions, Tab completion ---------------------

  // $XDG_STATE_HOME/parley/chat_history (else ~/.local/state/...): the last kHistoryLines prompts,
  // readable by this user only (prompts can be private).
  static constexpr int kHistoryLines = 1000;
  static std::string historyFile() {
    const char* state = std::getenv("XDG_STATE_HOME");
    const char* home = std::getenv("HOME");
    if (state && *state) return std::string(state) + "/parley/chat_history";
    return std::string(home && *home ? home : ".") + "/.local/state/parley/chat_history";
  }

  void loadHistory() {
    ::stifle_history(kHistoryLines);
    std::error_code ignored;
    if (std::filesystem::exists(historyFile(), ignored)) ::read_history(historyFile().c_str());
  }

  void saveHistory() {
    const std::filesystem::path file = historyFile();
    std::error_code ignored;
    std::filesystem::create_directories(file.parent_path(), ignored);
    const mode_t previous = ::umask(077);
    if (::write_history(file.c_str()) != 0) {
      if (!historyWarned_) out_ << "note: prompts cannot be kept in " << file.string() << "\n";
      historyWarned_ = true;
    }
    ::umask(previous);
  }

  // The completions of the word being typed: a command after "/", a branch after "/switch ".
  static char* completion(const char* text, int state) {
    static std::vector<std::string> matches;
    static size_t next = 0;
    if (state == 0) {
      matches.clear();
      next = 0;
      const std::string line = rl_line_buffer ? rl_line_buffer : "";
      const std::string word = text;
      std::vector<std::string> candidates;
      if (line.rfind("/switch ", 0) == 0 && completing_) {
        for (const auto& [name, branch] : completing_->branches_)
          candidates.push_back(name);
      } else if (!line.empty() && line[0] == '/' && line.find(' ') == std::string::npos) {
        for (const char* command : kCommands)
          candidates.push_back(std::string("/") + command);
      }
      for (const std::string& candidate : candidates) {
        if (candidate.rfind(word, 0) == 0) matches.push_back(candidate);
      }
    }
    if (next >= matches.size()) return nullptr;
    return ::strdup(matches[next++].c_str());
  }

  static char** complete(const char* text, int, int) {
    rl_attempted_completion_over = 1;  // no file names when nothing matches
    return rl_completion_matches(text, completion);
  }

  static constexpr const char* kCommands[] = {
      "help",   "history",  "usage",      "cost", "system",   "model", "set",
      "show",   "template", "regenerate", "edit", "continue", "fork",  "branches",
      "switch", "truncate", "filter",     "undo", "clear",    "save",  "load",
      "file",   "attach",   "copy",       "quit"};
  static inline ChatSession* completing_ = nullptr;
  bool historyWarned_ = false;

  // /copy [FILE]: the last reply, to FILE or to the first clipboard tool found.
  void copyLastReply(const std::string& file) {
    const auto view = current().manager.getMessages();
    auto last = std::find_if(view.rbegin(), view.rend(), [](const Message& m) {
      return m.role == Role::Assistant && !m.content.empty();
    });
    if (last == view.rend()) throw ValidationError("/copy", "there is no reply to copy");
    const std::string& text = last->content;
    if (!file.empty()) {
      std::ofstream out(file, std::ios::binary);
      out << text;
      if (!out.flush()) throw ValidationError("/copy", "cannot write " + file);
      out_ << "copied " << text.size() << " bytes to " << file << "\n";
      return;
    }
    std::vector<std::vector<std::string>> tools;
    if (std::getenv("WAYLAND_DISPLAY")) tools.push_back({"wl-copy"});
    if (std::getenv("DISPLAY")) {
      tools.push_back({"xclip", "-selection", "clipboard"});
      tools.push_back({"xsel", "--clipboard", "--input"});
    }
    tools.push_back({"pbcopy"});
    for (const auto& argv : tools) {
      if (!onPath(argv[0])) continue;
      std::stop_source stop;
      ToolContext context;
      context.stopToken = stop.get_token();
      std::jthread deadline([&stop](std::stop_token done) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        if (!cv.wait_for(lock, done, std::chrono::seconds(5), [] { return false; })) {
          if (!done.stop_requested()) stop.request_stop();
        }
      });
      try {
        runToolCommand(argv, text, context, 4096);
      } catch (const std::exception& e) {
        throw ValidationError("/copy", argv[0] + " failed: " + e.what());
      }
      out_ << "copied " << text.size() << " bytes to the clipboard (" << argv[0] << ")\n";
      return;
    }
    throw ValidationError("/copy",
                          "no clipboard tool found (wl-copy, xclip, xsel, pbcopy); "
                          "give a file: /copy FILE");
  }

  static bool onPath(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    size_t start = 0;
    while (start <= dirs.size()) {
      size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      const std::string dir = dirs.substr(start, end - start);
      if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
      start = end + 1;
    }
    return false;
  }

  void turn(const std::string& prompt) {
    Branch& branch = current();
    // The way back if the reply is cancelled or fails: run() keeps complete iterations, but a
    // chat turn is all or nothing.
    ConversationManager before = branch.manager.clone();
    RunOptions run;
    if (settings_.has_value()) run.request = requestWithSettings(branch.manager.options().request);
    const std::string model = run.request.value_or(branch.manager.options().request).model;
    const size_t viewBefore = branch.manager.getMessages().size();
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> firstToken;
    bool waiting = interactive_;
    bool atLineStart = true;
    TerminalFilter toTerminal(STDOUT_FILENO);
    std::optional<MarkdownRenderer> rendered;
    if (renderReplies_)
      rendered.emplace(
          MarkdownStyle{.color = colorReplies_, .width = terminalWidth(STDOUT_FILENO)});
    auto show = [&](const std::string& text) {
      out_ << (rendered ? rendered->feed(toTerminal(text)) : toTerminal(text));
    };
    auto flush = [&] {
      if (rendered) out_ << rendered->finish();
    };
    auto stopWaiting = [&] {
      if (waiting) out_ << "\r   \r";
      waiting = false;
    };
    // Reasoning of the current model call, shown folded before its text or tool calls.
    std::string reasoning;
    const bool dim = colorReplies_;
    auto showReasoning = [&] {
      if (reasoning.empty()) return;
      stopWaiting();
      if (!atLineStart) out_ << "\n";
      out_ << foldedReasoning(reasoning, dim) << "\n" << std::flush;
      atLineStart = true;
      reasoning.clear();
    };
    run.onChunk = [&](const StreamDelta& delta) {
      reasoning += delta.reasoning;
      if (delta.content.empty()) return true;
      if (!firstToken) firstToken = std::chrono::steady_clock::now();
      showReasoning();
      stopWaiting();
      show(delta.content);
      out_ << std::flush;
      atLineStart = delta.content.back() == '\n';
      return true;
    };
    run.onToolCall = [&](const ToolCall& call) {
      flush();
      showReasoning();
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
      // Attachments (/attach) go with this prompt; they stay pending if the turn fails.
      result =
          attachments_.empty()
              ? branch.manager.run(prompt, run)
              : branch.manager.run(std::vector<Message>{promptMessage(prompt, attachments_)}, run);
      attachments_.clear();
    } catch (const CancelledError&) {
      std::signal(SIGINT, previous);
      stopWaiting();
      flush();
      branch.manager = std::move(before);
      out_ << (atLineStart ? "" : "\n") << "[cancelled; the conversation is as before]\n";
      return;
    } catch (...) {
      std::signal(SIGINT, previous);
      stopWaiting();
      flush();
      branch.manager = std::move(before);
      if (!atLineStart) out_ << "\n";
      throw;
    }
    std::signal(SIGINT, previous);
    stopWaiting();
    if (!args_.stream) {
      if (auto r = result.message.extra.find("reasoning_content");
          r != result.message.extra.end() && r->is_string()) {
        reasoning = r->get<std::string>();
      }
    }
    showReasoning();
    if (!args_.stream) {
      show(result.content);
      atLineStart = result.content.empty() || result.content.back() == '\n';
    }
    flush();
    if (!atLineStart) out_ << "\n";
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
    const std::vector<Message> view = branch.manager.getMessages();
    const std::string priced = model.empty() ? clientModel_ : model;
    const std::optional<double> cost =
        prices_.cost(priced, std::span(view).subspan(std::min(viewBefore, view.size())));
    if (cost) {
      sessionCost_ += *cost;
    } else {
      ++unpricedTurns_;
    }
    out_ << "[cost " << formatUsd(cost) << (cost ? "" : " (no price for " + priced + ")") << "]\n";
    (void)start;
  }

  static constexpr const char* kSettings[] = {"model", "temperature", "top_p", "max_tokens",
                                              "seed"};

  // "" clears the setting. Values are checked here, so a bad one never reaches a request.
  // A system prompt first in the view, replacing the one there; one step of /undo.
  void setSystemPrompt(const std::string& text) {
    ConversationManager& manager = current().manager;
    const std::optional<ContextOperation> op = systemPromptOperation(manager, text);
    if (!op) return;  // already the prompt in use
    current().undo.push_back(manager.getMarkMap().currentBatch);
    applyContextOperation(manager, *op);
    save();
  }

  // /template NAME: its system prompt, model, parameters and prompt pattern from now on. Its
  // tools and profile need a new session (-t NAME): a session keeps its endpoint and tools.
  void useTemplate(const PromptTemplate& t) {
    if (!t.system.empty()) setSystemPrompt(t.system);
    if (!t.model.empty()) setSetting("model", t.model);
    nlohmann::json settings = settings_.value_or(nlohmann::json::object());
    for (const auto& [key, value] : t.parameters.items()) {
      const bool integer = key == "max_tokens" || key == "seed";
      const bool number = key == "temperature" || key == "top_p";
      if ((integer && !value.is_number_integer()) || (number && !value.is_number()) ||
          (key == "model" && !value.is_string())) {
        throw ValidationError("templates." + t.name + ".parameters." + key,
                              "has the wrong type (" + value.dump() + ")");
      }
      settings[key] = value;
    }
    settings_ = settings.empty() ? std::nullopt : std::optional<nlohmann::json>(settings);
    promptPattern_ = t.prompt;
    out_ << "template " << t.name << ":" << (t.system.empty() ? "" : " system prompt set;")
         << (t.model.empty() ? "" : " model " + t.model + ";")
         << (t.parameters.empty() ? "" : " settings " + t.parameters.dump() + ";")
         << (t.prompt.empty() ? " prompts as typed" : " prompts go through its pattern") << "\n";
    if (!t.profile.empty() || !t.tools.empty() || !t.toolsFiles.empty() || !t.mcp.empty()) {
      out_ << "note: its profile and tools take effect in a new session: parley chat -t " << t.name
           << "\n";
    }
  }

  void setSetting(const std::string& key, const std::string& value) {
    if (std::find(std::begin(kSettings), std::end(kSettings), key) == std::end(kSettings)) {
      throw ValidationError("/set " + key,
                            "unknown setting (model, temperature, top_p, max_tokens, seed)");
    }
    nlohmann::json settings = settings_.value_or(nlohmann::json::object());
    if (value.empty()) {
      settings.erase(key);
    } else if (key == "model") {
      settings[key] = resolveModelAlias(configFile(args_.endpoint), value);
    } else {
      try {
        size_t used = 0;
        if (key == "max_tokens" || key == "seed") {
          const long long number = std::stoll(value, &used);
          if (key == "max_tokens" && number < 1) throw std::invalid_argument("range");
          settings[key] = number;
        } else {
          const double number = std::stod(value, &used);
          if (number < 0 || (key == "top_p" && number > 1) || number > 2) {
            throw std::invalid_argument("range");
          }
          settings[key] = number;
        }
        if (used != value.size()) throw std::invalid_argument("trailing text");
      } catch (const std::logic_error&) {
        throw ValidationError("/set " + key,
                              "\"" + value +
                                  "\" is not a valid value (temperature 0-2, top_p 0-1, "
                                  "max_tokens >= 1, seed an integer)");
      }
    }
    settings_ = settings.empty() ? std::nullopt : std::optional<nlohmann::json>(settings);
  }

  ChatRequest requestWithSettings(ChatRequest request) const {
    const nlohmann::json& s = *settings_;
    if (s.contains("model")) request.model = s["model"].get<std::string>();
    if (s.contains("temperature")) request.temperature = s["temperature"].get<double>();
    if (s.contains("top_p")) request.topP = s["top_p"].get<double>();
    if (s.contains("max_tokens")) request.maxTokens = s["max_tokens"].get<int64_t>();
    if (s.contains("seed")) request.seed = s["seed"].get<int64_t>();
    // A template's other parameters travel as they are (reasoning_effort, stop, ...).
    for (const auto& [key, value] : s.items()) {
      if (std::find(std::begin(kSettings), std::end(kSettings), key) == std::end(kSettings)) {
        request.extra[key] = value;
      }
    }
    return request;
  }

  void showSettings() {
    const ChatRequest request = settings_ ? requestWithSettings(current().manager.options().request)
                                          : current().manager.options().request;
    out_ << "model: " << (request.model.empty() ? "(the endpoint's)" : request.model) << "\n";
    const auto show = [&](const char* key, const auto& value) {
      out_ << key << ": ";
      if (value) {
        out_ << *value;
      } else {
        out_ << "(the server's default)";
      }
      out_ << "\n";
    };
    show("temperature", request.temperature);
    show("top_p", request.topP);
    show("max_tokens", request.maxTokens);
    show("seed", request.seed);
    for (const auto& [key, value] : request.extra.items())
      out_ << key << ": " << value.dump() << "\n";
  }

  // The last prompt again, on a new branch; the old reply stays on the branch it was on.
  void regenerate() {
    const std::vector<Message> view = current().manager.getMessages();
    size_t last = view.size();
    for (size_t i = view.size(); i-- > 0;) {
      if (view[i].role == Role::User) {
        last = i;
        break;
      }
    }
    if (last == view.size()) throw ValidationError("/regenerate", "there is no prompt to redo");
    redoOnBranch(last, view[last].content, "regen", "regenerating");
  }

  // /edit N [TEXT]: prompt N of the view (as /history numbers it) replaced by TEXT, or by what
  // the editor makes of it, on a new branch; /edit alone: the next prompt written in the editor.
  void editPrompt(const std::string& argument) {
    if (argument.empty()) {
      const std::string prompt = fromEditor("");
      if (prompt.empty()) throw ValidationError("/edit", "the editor left nothing to send");
      turn(fillPrompt(promptPattern_, prompt));
      return;
    }
    const size_t space = argument.find(' ');
    const std::string number = argument.substr(0, space);
    const std::vector<Message> view = current().manager.getMessages();
    size_t index = 0;
    try {
      size_t used = 0;
      index = std::stoul(number, &used);
      if (used != number.size()) throw std::invalid_argument(number);
    } catch (const std::logic_error&) {
      throw ValidationError("/edit", "give the number /history shows: /edit N [TEXT]");
    }
    if (index >= view.size() || view[index].role != Role::User) {
      throw ValidationError("/edit",
                            "message " + number + " is not a prompt of this view (see /history)");
    }
    std::string prompt =
        space == std::string::npos ? fromEditor(view[index].content) : argument.substr(space + 1);
    if (prompt.empty()) throw ValidationError("/edit", "the edited prompt is empty; nothing sent");
    redoOnBranch(index, prompt, "edit", "editing");
  }

  // Forks the conversation into a new branch without the view's messages from `index` on and
  // sends `prompt` there; the branch it came from keeps everything.
  void redoOnBranch(size_t index, const std::string& prompt, const std::string& prefix,
                    const std::string& what) {
    ConversationManager& manager = current().manager;
    const size_t count = manager.getMessages().size();
    const std::string branchName = freshName(prefix);
    ThreadOptions fork;
    fork.metadata = {{"branch", branchName}};
    std::shared_ptr<StoredThread> thread = current().thread->fork(manager, fork);
    ConversationManager redo = manager.clone(thread);
    TruncateOp drop;
    drop.removeLast = static_cast<int64_t>(count - index);
    applyContextOperation(redo, drop);
    addBranch(branchName, std::move(redo), std::move(thread));
    out_ << what << " on branch " << branchName << " (the old reply stays on its branch)\n";
    save();
    turn(prompt);
  }

  // Runs $VISUAL (else $EDITOR, else vi) on a file holding `text` and returns what it saved,
  // without a final newline. The editor gets the terminal; a non-zero exit sends nothing.
  std::string fromEditor(const std::string& text) {
    const char* visual = std::getenv("VISUAL");
    const char* editor = visual && *visual ? visual : std::getenv("EDITOR");
    const std::string command = editor && *editor ? editor : "vi";
    std::string path = (std::filesystem::temp_directory_path() / "parley-edit-XXXXXX.md").string();
    const int fd = ::mkstemps(path.data(), 3);
    if (fd < 0) throw ValidationError("/edit", "cannot make a file for the editor");
    {
      const ssize_t n = ::write(fd, text.data(), text.size());
      ::close(fd);
      if (n != static_cast<ssize_t>(text.size()))
        throw ValidationError("/edit", "cannot write " + path);
    }
    // As git runs its editor: through the shell, so EDITOR may carry arguments ("code -w").
    const std::string script = command + " \"$1\"";
    const char* argv[] = {"sh", "-c", script.c_str(), "sh", path.c_str(), nullptr};
    pid_t pid = -1;
    int status = 0;
    const int spawned =
        ::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ);
    while (spawned == 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::ifstream in(path, std::ios::binary);
    std::string edited((std::istreambuf_iterator<char>(in)), {});
    std::filesystem::remove(path);
    if (spawned != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw ValidationError("/edit", "the editor (" + command + ") failed; nothing sent");
    }
    while (!edited.empty() && (edited.back() == '\n' || edited.back() == '\r'))
      edited.pop_back();
    return edited;
  }

  // The branches of earlier sessions: stored forks named by /fork or /regenerate, recursively.
  void restoreBranches(const ConversationOptions& options) {
    std::vector<std::string> parents = {branches_.at("main").thread->threadId()};
    while (!parents.empty()) {
      const std::string parent = parents.back();
      parents.pop_back();
      ThreadListOptions list;
      list.parentId = parent;
      for (const ThreadInfo& info : store_->listThreads(list)) {
        parents.push_back(info.id);
        if (!info.metadata.is_object() || !info.metadata.contains("branch")) continue;
        const std::string name = info.metadata["branch"].get<std::string>();
        if (branches_.count(name)) continue;
        ConversationManager manager(options);
        auto thread = std::make_shared<StoredThread>(store_, info.id);
        thread->attach(manager);
        branches_.emplace(name, Branch{std::move(manager), std::move(thread)});
      }
    }
  }

  void applyOperation(const std::string& name, std::string argument) {
    constexpr std::string_view kDryRun = "--dry-run";
    const bool dryRun =
        argument.size() >= kDryRun.size() &&
        argument.compare(argument.size() - kDryRun.size(), kDryRun.size(), kDryRun) == 0;
    if (dryRun) argument.resize(argument.size() - kDryRun.size());
    nlohmann::json config;
    try {
      config = parseJson(argument.find_first_not_of(" \t") == std::string::npos ? "{}" : argument);
    } catch (const ProtocolError&) {
      throw ValidationError("/" + name, "expects a JSON object, e.g. /truncate {\"keepLast\": 4}");
    }
    ConversationManager& manager = current().manager;
    if (dryRun) {
      const ContextOperationPreview p = previewContextOperation(
          manager, parseContextOperation({{"operation", name}, {name, config}}));
      out_ << name << " (dry run, nothing changed): " << p.messagesAfter << " of "
           << p.messagesBefore << " messages would stay; prompt " << p.promptTokensBefore << " -> "
           << p.promptTokensAfter << " tokens (saves " << p.savedTokens << ")";
      if (p.firstChangedMessage) {
        out_ << "; cached prefix lost: " << p.destroyedPrefixTokens << " tokens ("
             << p.destroyedPrefixBytes << " bytes) from message " << *p.firstChangedMessage;
      } else {
        out_ << "; the cached prefix stays";
      }
      out_ << "\n";
      return;
    }
    const size_t batchBefore = manager.getMarkMap().currentBatch;
    const std::vector<Message> before = manager.getMessages();
    ContextOperationResult result = applyContextOperation(
        manager, parseContextOperation({{"operation", name}, {name, config}}));
    keepWellFormed(manager, before);
    current().undo.push_back(batchBefore);
    save();
    out_ << name << ": " << manager.getMessageCount() << " messages visible";
    if (result.removedForPairing) {
      out_ << " (" << result.removedForPairing << " dropped to keep tool calls paired)";
    }
    out_ << "\n";
  }

  // What the REPL keeps true of its view after an edit, whatever the operation did: its system
  // prompt stays first, and the first message after it is not a reply to a prompt that is gone.
  // Each repair is one more batch; /undo goes back over all of them at once.
  static void keepWellFormed(ConversationManager& manager, const std::vector<Message>& before) {
    std::vector<Message> view = manager.getMessages();
    size_t firstPrompt = 0;
    while (firstPrompt < view.size() && view[firstPrompt].role != Role::User)
      ++firstPrompt;
    const bool leadingReplies =
        firstPrompt < view.size() &&
        std::any_of(view.begin(), view.begin() + static_cast<std::ptrdiff_t>(firstPrompt),
                    [](const Message& m) { return m.role != Role::System; });
    if (leadingReplies) {
      TruncateOp drop;
      drop.removeFirst = static_cast<int64_t>(firstPrompt);
      applyContextOperation(manager, drop);
      view = manager.getMessages();
    }
    if (!before.empty() && before.front().role == Role::System &&
        (view.empty() || view.front().role != Role::System)) {
      applyContextOperation(manager, InsertOp{0, {before.front()}});
    }
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
    } else if (name == "copy") {
      copyLastReply(argument);
    } else if (name == "edit") {
      editPrompt(argument);
    } else if (name == "history") {
      const auto messages = manager.getMessages();
      for (size_t i = 0; i < messages.size(); ++i) {
        const Message& m = messages[i];
        std::string line = "[" + std::to_string(i) + "] " + std::string(toString(m.role)) + ": " +
                           preview(m.content);
        for (const ToolCall& call : m.toolCalls)
          line += " <call " + call.name + " " + preview(call.arguments) + ">";
        out_ << forTerminal(line, STDOUT_FILENO) << "\n";
      }
    } else if (name == "usage") {
      const TokenUsageStats usage = manager.getTokenUsage();
      if (usage.lastRequest) {
        out_ << "last call: " << usage.lastRequest->promptTokens << " prompt, "
             << usage.lastRequest->completionTokens << " completion, "
             << usage.lastRequest->totalTokens << " total" << usageDetails(*usage.lastRequest)
             << "\n";
      }
      out_ << "all calls: " << usage.cumulative.promptTokens << " prompt, "
           << usage.cumulative.completionTokens << " completion, " << usage.cumulative.totalTokens
           << " total over " << usage.requests << " calls\n"
           << "context: " << usage.context.contextTokens
           << (usage.context.estimated ? " (est.)" : "") << " of "
           << (usage.context.tokenLimit > 0 ? std::to_string(usage.context.tokenLimit)
                                            : std::string("no limit"))
           << "\n";
    } else if (name == "cost") {
      out_ << "this session: " << formatUsd(sessionCost_);
      if (unpricedTurns_ > 0) {
        out_ << " (not counted: " << unpricedTurns_ << " unpriced turn"
             << (unpricedTurns_ == 1 ? "" : "s") << ")";
      }
      out_ << "\n";
    } else if (name == "system") {
      if (argument.empty()) throw ValidationError("/system", "give the prompt: /system TEXT");
      setSystemPrompt(argument);
      out_ << "system prompt set\n";
    } else if (name == "template") {
      if (argument.empty()) throw ValidationError("/template", "give a name: /template NAME");
      useTemplate(readTemplate(configFile(args_.endpoint), argument));
    } else if (name == "model") {
      if (argument.empty()) throw ValidationError("/model", "give a model name: /model NAME");
      setSetting("model", argument);
      out_ << "model: " << settings_->at("model").get<std::string>() << "\n";
    } else if (name == "set") {
      const size_t split = argument.find(' ');
      const std::string key = argument.substr(0, split);
      if (key.empty()) throw ValidationError("/set", "give a setting: /set KEY [VALUE]");
      setSetting(key, split == std::string::npos ? "" : argument.substr(split + 1));
      showSettings();
    } else if (name == "show") {
      if (argument != "settings") throw ValidationError("/show", "try /show settings");
      showSettings();
    } else if (name == "continue") {
      turn(argument.empty() ? "Continue." : argument);
    } else if (name == "regenerate") {
      regenerate();
    } else if (name == "fork") {
      const std::string branchName = argument.empty() ? freshName("fork") : argument;
      if (branches_.count(branchName)) {
        throw ValidationError("/fork", "a branch named \"" + branchName + "\" exists");
      }
      ThreadOptions fork;
      fork.metadata = {{"branch", branchName}};
      std::shared_ptr<StoredThread> thread = current().thread->fork(manager, fork);
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
      std::vector<size_t>& undo = current().undo;
      const size_t batch = manager.getMarkMap().currentBatch;
      if (batch == 0) {
        out_ << "nothing to undo\n";
      } else {
        // An edit of an earlier session is undone one batch at a time.
        const size_t target = undo.empty() ? batch - 1 : undo.back();
        if (!undo.empty()) undo.pop_back();
        manager.rollbackToBatch(target);
        save();
        out_ << "undone: " << manager.getMessageCount() << " messages visible\n";
      }
    } else if (name == "clear") {
      current().undo.push_back(manager.getMarkMap().currentBatch);
      manager.clearMessages(true);
      save();
      out_ << "cleared: " << manager.getMessageCount() << " messages visible\n";
    } else if (name == "save") {
      if (argument.empty()) throw ValidationError("/save", "give a file: /save FILE");
      std::ofstream file(argument, std::ios::binary);
      file << manager.createSnapshot().dump(2) << "\n";
      if (!file) throw ValidationError(argument, "cannot write the file");
      out_ << "saved to " << argument << "\n";
    } else if (name == "file") {
      if (argument.empty()) throw ValidationError("/file", "give a path: /file PATH [PROMPT]");
      const size_t split = argument.find(' ');
      const std::string path = argument.substr(0, split);
      const std::string prompt = split == std::string::npos ? "" : argument.substr(split + 1);
      std::vector<std::string> skipped;
      const std::string files = filesAsText({path}, skipped);
      for (const std::string& file : skipped)
        out_ << "skipped the binary file " << file << "\n";
      if (files.empty()) throw ValidationError(path, "holds no text file");
      turn(composePrompt(prompt, "", files));
    } else if (name == "attach") {
      if (argument.empty()) throw ValidationError("/attach", "give a path: /attach FILE");
      std::vector<Part> parts = attachmentParts({argument});
      std::vector<Part> all = attachments_;
      all.push_back(parts.front());
      promptMessage("", all);  // throws past the per-message caps, before keeping it
      attachments_ = std::move(all);
      out_ << "attached " << argument << " (" << parts.front().mimeType << ", "
           << parts.front().bytes.size() << " bytes): sent with the next prompt\n";
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
      const ThreadInfo info = importThread(*store_, snapshot);
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

  ChatArgs args_;               // with the -t template applied
  bool renderReplies_ = false;  // --format text
  bool colorReplies_ = false;
  std::string promptPattern_;  // the template's prompt; "" = what is typed
  std::ostream& out_;
  std::mutex mcpTerminal_;  // an MCP server's questions, one at a time
  bool interactive_ = false;
  std::unique_ptr<mock::MockServer> mock_;
  std::shared_ptr<ConversationStore> store_;
  std::map<std::string, Branch> branches_;
  std::string current_ = "main";
  std::vector<Part> attachments_;  // /attach: sent as parts with the next prompt
  // /set overrides of the request (an unset key keeps the endpoint's value); nullopt: none.
  std::optional<nlohmann::json> settings_;
  PriceTable prices_;
  std::string clientModel_;  // the endpoint's model, priced when no /model or /set model is in use
  double sessionCost_ = 0;   // the priced turns of this session, every branch
  int unpricedTurns_ = 0;
};

}  // namespace

void addChatCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Talk with a model interactively: streaming, tools, forks, persistence");
  addEndpointOptions(*cmd, args->endpoint);
  cmd->add_option("--tools", args->toolSets,
                  "Offer a built-in tool set: demo (calculate, get_time, get_weather)")
      ->allow_extra_args(false);
  cmd->add_option("--tools-file", args->toolFiles, "Offer the tools of a TOML file")
      ->allow_extra_args(false);
  addMcpOption(*cmd, args->mcpServers);
  cmd->footer(std::string("\nIn the session:\n") + kHelp +
              "Ctrl-C at the prompt clears the line; everything is already saved.");
  cmd->add_option("--system", args->system, "System prompt of a new conversation");
  addTemplateOptions(*cmd, args->templateName, args->saveTemplateName);
  cmd->add_option("--format", args->format,
                  "Replies as text (Markdown rendered, wrapped; the default on a terminal) or "
                  "markdown (as the model wrote them)");
  cmd->add_option("--color", args->color,
                  "Styles in --format text: auto (on a terminal, unless NO_COLOR is set), always "
                  "or never")
      ->capture_default_str();
  cmd->add_option("--db", args->db,
                  "Conversation store: FILE, sqlite://FILE or postgresql://... (default: "
                  "$XDG_DATA_HOME/parley/parley.db, else ~/.local/share/parley/parley.db)");
  cmd->add_option("--thread", args->thread, "Resume this stored thread (default: a new one)");
  cmd->add_flag("-c,--continue", args->continueLast, "Resume the thread used last");
  cmd->add_option("--max-iterations", args->maxIterations, "Model calls allowed in one turn")
      ->capture_default_str();
  cmd->add_option("--token-limit", args->tokenLimit, "Context limit shown by /usage (0: none)")
      ->capture_default_str();
  addPricesOption(*cmd, args->pricesFile);
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
