// `parley chat`: an interactive conversation with streaming, tools, forks and persistence.
// The session (chat_session.hpp) is split by job: this file starts it and reads its lines
// (libedit, history, Tab completion); chat_turn.cpp runs and shows a turn; chat_commands.cpp
// holds the slash commands' table and most commands; chat_branches.cpp the branches, their
// threads and the context edits.
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
#include "chat_session.hpp"

namespace parley::cli {
namespace {

// A new thread's id, chosen before the thread is made: the thread is created with the first
// save, so a session quit before any prompt leaves nothing in the store.
std::string newThreadId() {
  std::random_device random;
  constexpr const char* kHex = "0123456789abcdef";
  std::string id = "t-";
  for (int i = 0; i < 32; ++i)
    id += kHex[random() % 16];
  return id;
}

}  // namespace

int ChatSession::run() {
  if (args_.threadGiven && args_.thread.empty()) {
    throw ValidationError("--thread", "needs a thread id (leave --thread out to start a new one)");
  }
  interactive_ = ::isatty(STDIN_FILENO) != 0;
  // First, before anything starts a thread (the built-in mock, HTTP and tool pools): every
  // thread inherits SIGINT blocked, and only the interrupts' own thread takes it.
  interrupts_.emplace(!interactive_);
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
    // Before anything makes libedit set itself up (loadHistory does).
    installPasteReader(interrupts_->interruptFd());
    loadHistory();
    completing_ = this;
    rl_attempted_completion_function = complete;
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
    if (toolSets.empty() && args_.toolFiles.empty() && args_.mcpServers.empty() &&
        args_.a2aAgents.empty())
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
  auto tools = makeToolRegistry(toolSets, args_.toolFiles);
  std::shared_ptr<LlmClient> llm = makeClient(client);
  // A server's forms and sampling requests ask the person at the terminal.
  addMcpServers(*tools, args_.mcpServers, configFile(args_.endpoint), out_, &out_,
                terminalForm(std::cin, out_, mcpTerminal_),
                modelSampling(llm, [this](const McpSamplingRequest& request) {
                  std::lock_guard lock(mcpTerminal_);
                  out_ << "\n[mcp." << request.server << " asks the model] "
                       << preview(request.params["messages"].dump(), 300)
                       << "\n  let the model answer? [y/N] " << std::flush;
                  std::string line;
                  return std::getline(std::cin, line) && (line == "y" || line == "yes");
                }));
  // A remote agent's question comes back to the model, which may ask the person.
  addA2aAgents(*tools, args_.a2aAgents, configFile(args_.endpoint));
  if (args_.maxIterations < 1) throw ValidationError("--max-iterations", "must be at least 1");
  if (args_.tokenLimit < 0) throw ValidationError("--token-limit", "must be >= 0");
  turn_.systemPrompt = args_.system;
  turn_.maxIterations = args_.maxIterations;
  turn_.tokenLimit = args_.tokenLimit;
  toolTape_ = toolTapeFor(args_.endpoint);  // --record / --replay: the tools' results too
  turn_.budget.prices = std::make_shared<const PriceTable>(prices_);  // prices the spans
  ConversationOptions options = configureConversation(client, llm, tools, turn_);
  options.stream = args_.stream;
  // A long call's progress (a remote agent working) between its [tool] lines.
  showToolProgress(options, out_, STDOUT_FILENO, mcpTerminal_);
  if (args_.jsonMode) options.request.responseFormat = ResponseFormat::jsonObject();
  if (args_.continueLast && !args_.thread.empty()) {
    throw ValidationError("-c", "resumes the thread used last; it cannot go with --thread");
  }

  store_ = openCliStore(args_.db);
  // The session's turns are saved by save() after each whole turn, into the thread of the
  // branch they were typed on; no manager saves by itself (a copied persist would write one
  // branch's turns into another's thread).
  options.persist = nullptr;
  options_ = options;
  ConversationManager manager(options);
  std::string id = args_.thread;
  std::string lastUsed;  // -c: the thread of the branch used last
  if (args_.continueLast) {
    lastUsed = mostRecentThread(*store_);
    if (lastUsed.empty()) throw ValidationError("-c", "there is no stored thread to resume");
    id = sessionRoot(lastUsed);
  }
  if (id.empty()) id = newThreadId();
  auto stored = std::make_shared<StoredThread>(store_, id);
  const bool resumed = store_->threadInfo(id).has_value();
  if (resumed) stored->load(manager);
  branches_.emplace("main", Branch{std::move(manager), std::move(stored), {}, resumed});
  if (resumed) restoreBranches();
  std::string onBranch;
  for (const auto& [name, branch] : branches_) {
    if (name != "main" && branch.thread->threadId() == lastUsed) onBranch = name;
  }
  if (!onBranch.empty()) current_ = onBranch;
  out_ << intro << "\n"
       << "thread " << id
       << (resumed ? " (resumed" + (onBranch.empty() ? "" : "; on branch " + onBranch) + ")"
                   : std::string(" (new)"))
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
  // A script learns that a turn failed (an endpoint that cannot be reached...).
  return !interactive_ && turnFailed_ ? kExitFailure : kExitOk;
}

std::optional<std::string> ChatSession::readLine(const std::string& continuation) {
  if (interactive_) {
    const std::string prompt =
        continuation.empty() ? (current_ == "main" ? "" : current_ + " ") + "> " : continuation;
    // Ctrl-C at the prompt drops the line, as in a shell: the interrupts' thread makes the
    // paste reader report end of input, so readline() returns, and the line is dropped here.
    // A Ctrl-C from before the prompt was shown is not for this line.
    interrupts_->takePromptInterrupt();
    promptInterrupted_ = false;
    enableBracketedPaste(STDOUT_FILENO);
    char* raw = ::readline(prompt.c_str());
    disableBracketedPaste(STDOUT_FILENO);
    if (interrupts_->takePromptInterrupt()) {
      std::free(raw);
      takePaste();
      promptInterrupted_ = true;
      // The paste reader reads the terminal itself, so the ^C is echoed here, as a shell does.
      out_ << "^C\n" << std::flush;
      return std::string();
    }
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
std::optional<std::string> ChatSession::readBlock() {
  std::string text;
  for (;;) {
    std::optional<std::string> line = readLine("... ");
    if (!line) return std::nullopt;
    if (line->empty() && promptInterrupted_) return std::string();  // Ctrl-C: drop it
    if (*line == "\"\"\"") return text;
    if (!text.empty()) text += "\n";
    text += *line;
  }
}

void ChatSession::turnOrError(const std::string& prompt) {
  try {
    turn(prompt);
  } catch (const Error& e) {
    out_ << "error: " << preview(e.what(), 400) << "\n";
  }
  out_ << std::flush;
}

// Saves the current branch into its own thread (made now if this is its first save).
void ChatSession::save() {
  Branch& branch = current();
  if (!branch.stored) {
    const std::vector<Message> all = branch.manager.getAllMessages();
    auto prompt =
        std::find_if(all.begin(), all.end(), [](const Message& m) { return m.role == Role::User; });
    ThreadOptions create;
    if (prompt != all.end()) create.title = titleFromPrompt(prompt->content);
    branch.thread->attach(branch.manager, create);
    branch.stored = true;
    return;
  }
  branch.thread->save(branch.manager);
}

std::string ChatSession::historyFile() {
  const char* state = std::getenv("XDG_STATE_HOME");
  const char* home = std::getenv("HOME");
  if (state && *state) return std::string(state) + "/parley/chat_history";
  return std::string(home && *home ? home : ".") + "/.local/state/parley/chat_history";
}

void ChatSession::loadHistory() {
  ::stifle_history(kHistoryLines);
  std::error_code ignored;
  if (std::filesystem::exists(historyFile(), ignored)) ::read_history(historyFile().c_str());
}

void ChatSession::saveHistory() {
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
char* ChatSession::completion(const char* text, int state) {
  static std::vector<std::string> matches;
  static size_t next = 0;
  if (state == 0) {
    matches.clear();
    next = 0;
    const std::string line = rl_line_buffer ? rl_line_buffer : "";
    const std::string word = text;
    std::vector<std::string> candidates;
    const size_t space = line.find(' ');
    if (!line.empty() && line[0] == '/' && space == std::string::npos) {
      for (const Command& command : commands())
        candidates.push_back(std::string("/") + command.name);
    } else if (!line.empty() && line[0] == '/' && completing_) {
      const std::string name = line.substr(1, space - 1);
      for (const Command& command : commands()) {
        if (command.branchArgument && name == command.name) {
          for (const auto& [branch, unused] : completing_->branches_)
            candidates.push_back(branch);
        }
      }
    }
    for (const std::string& candidate : candidates) {
      if (candidate.rfind(word, 0) == 0) matches.push_back(candidate);
    }
  }
  if (next >= matches.size()) return nullptr;
  return ::strdup(matches[next++].c_str());
}

char** ChatSession::complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;  // no file names when nothing matches
  return rl_completion_matches(text, completion);
}

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
  addA2aOption(*cmd, args->a2aAgents);
  cmd->footer(std::string("\nIn the session:\n") + ChatSession::helpText() +
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
