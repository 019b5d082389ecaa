// The state of one `parley chat` session and its operations, shared by the files that make
// up the command (chat.cpp, chat_turn.cpp, chat_commands.cpp, chat_branches.cpp). Internal to
// the command line. Not thread-safe: one session, run by the thread that reads its input (its
// Ctrl-C thread only talks to it through ChatInterrupts).
#pragma once

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
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "bracketed_paste.hpp"
#include "chat_interrupt.hpp"
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
#include "parley/turn_defaults.hpp"
#include "prices_option.hpp"
#include "prompt_input.hpp"
#include "template_config.hpp"
#include "terminal.hpp"
#include "thread_title.hpp"
#include "tool_file.hpp"

namespace parley::cli {

struct ChatArgs {
  EndpointArgs endpoint;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::vector<std::string> mcpServers;
  std::vector<std::string> a2aAgents;  // --a2a NAME: [a2a.NAME] tables of the config file
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

class ChatSession {
 public:
  ChatSession(const ChatArgs& args, std::ostream& out) : args_(args), out_(out) {}

  int run();

 private:
  struct Branch {
    ConversationManager manager;
    std::shared_ptr<StoredThread> thread;
    // The batch before each edit of this session, for /undo (an edit may take several batches).
    std::vector<size_t> undo{};
    // Whether the thread exists: a new session's thread is made by its first save.
    bool stored = true;
  };

  static std::string joinNames(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names)
      text += (text.empty() ? "" : ", ") + n;
    return text;
  }

  Branch& current() { return branches_.at(current_); }
  const Branch& current() const { return branches_.at(current_); }

  std::optional<std::string> readLine(const std::string& continuation = "");

  // The lines up to the closing `"""`, joined; nullopt at end of input (nothing is sent).
  std::optional<std::string> readBlock();

  void turnOrError(const std::string& prompt);

  // Saves the current branch into its own thread (made now if this is its first save).
  void save();

  // --- the prompt's line editor: history across sessions, Tab completion ---------------------

  // $XDG_STATE_HOME/parley/chat_history (else ~/.local/state/...): the last kHistoryLines prompts,
  // readable by this user only (prompts can be private).
  static constexpr int kHistoryLines = 1000;
  static std::string historyFile();

  void loadHistory();

  void saveHistory();

  // The completions of the word being typed: a command after "/", a branch after "/switch ".
  static char* completion(const char* text, int state);

  static char** complete(const char* text, int, int);

  static inline ChatSession* completing_ = nullptr;
  bool historyWarned_ = false;

  // /copy [FILE]: the last reply, to FILE or to the first clipboard tool found.
  void copyLastReply(const std::string& file);

  static bool onPath(const std::string& program);

  void turn(const std::string& prompt);

  static constexpr const char* kSettings[] = {"model", "temperature", "top_p", "max_tokens",
                                              "seed"};

  // "" clears the setting. Values are checked here, so a bad one never reaches a request.
  // A system prompt first in the view, replacing the one there; one step of /undo.
  void setSystemPrompt(const std::string& text);

  // /template NAME: its system prompt, model, parameters and prompt pattern from now on. Its
  // tools and profile need a new session (-t NAME): a session keeps its endpoint and tools.
  void useTemplate(const PromptTemplate& t);

  void setSetting(const std::string& key, const std::string& value);

  // A model the endpoint does not list is refused (a typo would fail every later turn); when
  // the endpoint gives no list, the name is taken as given.
  void checkModel(const std::string& name);

  ChatRequest requestWithSettings(ChatRequest request) const;

  void showSettings();

  // The last prompt again, on a new branch; the old reply stays on the branch it was on.
  void regenerate();

  // /edit N [TEXT]: prompt N of the view (as /history numbers it) replaced by TEXT, or by what
  // the editor makes of it, on a new branch; /edit alone: the next prompt written in the editor.
  void editPrompt(const std::string& argument);

  // Forks the conversation into a new branch without the view's messages from `index` on and
  // sends `prompt` there; the branch it came from keeps everything.
  void redoOnBranch(size_t index, const std::string& prompt, const std::string& prefix,
                    const std::string& what);

  // Runs $VISUAL (else $EDITOR, else vi) on a file holding `text` and returns what it saved,
  // without a final newline. The editor gets the terminal; a non-zero exit sends nothing.
  std::string fromEditor(const std::string& text);

  // The branches of earlier sessions: stored forks named by /fork, /edit or /regenerate, and the
  // threads /load made (tied to the session by their metadata, "branchOf"), with their forks.
  void restoreBranches();

  // The session a branch's thread belongs to: its main thread, found through the forks' parents
  // and the loaded branches' "branchOf". A thread that is no branch is its own session.
  std::string sessionRoot(std::string id);

  void applyOperation(const std::string& name, std::string argument);

  // What the REPL keeps true of its view after an edit, whatever the operation did: its system
  // prompt stays first, and the first message after it is not a reply to a prompt that is gone.
  // Each repair is one more batch; /undo goes back over all of them at once.
  static void keepWellFormed(ConversationManager& manager, const std::vector<Message>& before);

  void addBranch(const std::string& name, ConversationManager manager,
                 std::shared_ptr<StoredThread> thread);

  std::string freshName(const std::string& stem);

  // --- the slash commands: one table gives /help, the dispatch and Tab completion -----------

  using Action = void (ChatSession::*)(const std::string& argument);
  struct Command {
    const char* name;
    const char* usage;  // as /help shows it, after the name
    const char* help;
    Action run;
    bool branchArgument = false;  // Tab completes branch names after it
  };

  static const std::vector<Command>& commands() {
    static const std::vector<Command> table = {
        {"help", "", "this list", &ChatSession::help},
        {"history", "", "the visible messages", &ChatSession::history},
        {"usage", "", "tokens: last call, total, the context against the limit",
         &ChatSession::usage},
        {"cost", "", "what this session's replies cost (--prices)", &ChatSession::cost},
        {"system", "[TEXT]", "set the system prompt (no TEXT: show it)", &ChatSession::system},
        {"model", "[NAME]", "use another model from the next reply on (no NAME: show it)",
         &ChatSession::model},
        {"set", "KEY [VALUE]", "model, temperature, top_p, max_tokens or seed (no value: default)",
         &ChatSession::set},
        {"show", "settings|tools",
         "the request settings in use, or the last turn's provider-run tools", &ChatSession::show},
        {"template", "NAME", "use a [templates.NAME] table: system prompt, model, settings, prompt",
         &ChatSession::templateCommand},
        {"title", "[TEXT]", "name this thread (no TEXT: the model proposes a title)",
         &ChatSession::title},
        {"regenerate", "", "redo the last reply on a new branch (the old one stays)",
         &ChatSession::regenerateCommand},
        {"edit", "[N] [TEXT]", "prompt N (see /history) changed, on a new branch; no N: the editor",
         &ChatSession::editPrompt},
        {"continue", "[TEXT]", "ask the model to go on", &ChatSession::continueCommand},
        {"fork", "[NAME]", "copy this conversation into a new branch and switch to it",
         &ChatSession::fork},
        {"branches", "", "list the branches", &ChatSession::listBranches},
        {"switch", "NAME", "continue another branch", &ChatSession::switchBranch, true},
        {"truncate", "JSON", "e.g. /truncate {\"keepLast\": 4}  (context operation)",
         &ChatSession::truncate},
        {"filter", "JSON",
         "e.g. /filter {\"roles\": [\"user\"]}  (context operation); either with --dry-run at "
         "the end: what it would cost the prompt cache and save, nothing changed",
         &ChatSession::filter},
        {"undo", "", "roll back the last context operation", &ChatSession::undo},
        {"clear", "", "clear the context (keeps the system prompt)", &ChatSession::clear},
        {"save", "FILE", "write the conversation as a snapshot JSON file",
         &ChatSession::saveSnapshot},
        {"load", "FILE", "load a snapshot file as a new branch", &ChatSession::loadSnapshot},
        {"file", "PATH [PROMPT]", "send a file's (or a directory's) text, after PROMPT if given",
         &ChatSession::file},
        {"attach", "FILE", "send an image, audio or document with the next prompt",
         &ChatSession::attach},
        {"copy", "[FILE]", "the last reply to the clipboard (wl-copy, xclip, xsel, pbcopy) or FILE",
         &ChatSession::copyLastReply},
        {"quit", "", "end the session (so do exit, quit and Ctrl-D)", &ChatSession::quit},
    };
    return table;
  }

 public:
  // /help's text, also the footer of `parley chat --help`.
  static std::string helpText() {
    std::string text = "Commands:\n";
    for (const Command& c : commands()) {
      std::string left = "  /" + std::string(c.name) + (*c.usage ? " " : "") + c.usage;
      left.resize(std::max<size_t>(left.size() + 1, 24), ' ');
      text += left + c.help + "\n";
    }
    return text +
           "  \"\"\"                   on a line of its own: starts and ends a multi-line "
           "prompt\n"
           "Tab completes commands and branch names; prompts are remembered across sessions.\n"
           "Ctrl-C during a reply cancels it.\n";
  }

 private:
  // Returns false to end the session.
  bool command(const std::string& line);

  void help(const std::string&) { out_ << helpText(); }
  void quit(const std::string&) { quitting_ = true; }

  void history(const std::string&);

  void usage(const std::string&);

  void cost(const std::string&);

  void system(const std::string& argument);

  void templateCommand(const std::string& argument);

  // The request's model: a /set or /template one, else the endpoint's.
  std::string modelInUse() const;

  void model(const std::string& argument);

  void set(const std::string& argument);

  void show(const std::string& argument);

  // /title TEXT names the thread; /title alone asks the model for a title (thread_title.hpp).
  void title(const std::string& argument);

  void regenerateCommand(const std::string&) { regenerate(); }
  void continueCommand(const std::string& argument);

  void fork(const std::string& argument);

  void listBranches(const std::string&);

  void switchBranch(const std::string& argument);

  void truncate(const std::string& argument) { applyOperation("truncate", argument); }
  void filter(const std::string& argument) { applyOperation("filter", argument); }

  void undo(const std::string&);

  void clear(const std::string&);

  void saveSnapshot(const std::string& argument);

  void file(const std::string& argument);

  void attach(const std::string& argument);

  void loadSnapshot(const std::string& argument);

  ChatArgs args_;  // with the -t template applied
  std::optional<ChatInterrupts> interrupts_;
  bool promptInterrupted_ = false;  // the last line read was dropped by Ctrl-C
  bool turnFailed_ = false;         // a turn failed (not cancelled): a script's exit code says so
  bool quitting_ = false;           // /quit
  std::optional<std::vector<std::string>> knownModels_;  // the endpoint's list, asked once
  ConversationOptions options_;  // every branch's (no persist: save() saves)
  bool renderReplies_ = false;   // --format text
  bool colorReplies_ = false;
  std::string promptPattern_;  // the template's prompt; "" = what is typed
  std::ostream& out_;
  bool interactive_ = false;
  std::unique_ptr<mock::MockServer> mock_;
  std::shared_ptr<ConversationStore> store_;
  std::map<std::string, Branch> branches_;
  std::string current_ = "main";
  std::vector<Part> attachments_;  // /attach: sent as parts with the next prompt
  // /set overrides of the request (an unset key keeps the endpoint's value); nullopt: none.
  std::optional<nlohmann::json> settings_;
  PriceTable prices_;
  TurnDefaults turn_;  // the turn's settings every branch's conversation is made with
  std::shared_ptr<ToolTape> toolTape_;  // --record / --replay: every turn's tool calls
  std::mutex mcpTerminal_;              // an MCP server's questions, one at a time
  std::string clientModel_;  // the endpoint's model, priced when no /model or /set model is in use
  double sessionCost_ = 0;   // the priced turns of this session, every branch
  int unpricedTurns_ = 0;
};

}  // namespace parley::cli
