// `parley chat`: branches, their threads, and the context edits (chat_session.hpp).
#include "chat_session.hpp"

namespace parley::cli {
// The last prompt again, on a new branch; the old reply stays on the branch it was on.
void ChatSession::regenerate() {
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
void ChatSession::editPrompt(const std::string& argument) {
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
void ChatSession::redoOnBranch(size_t index, const std::string& prompt, const std::string& prefix,
                               const std::string& what) {
  ConversationManager& manager = current().manager;
  const size_t count = manager.getMessages().size();
  const std::string branchName = freshName(prefix);
  ThreadOptions fork;
  fork.metadata = {{"branch", branchName}};
  std::shared_ptr<StoredThread> thread = current().thread->fork(manager, fork);
  ConversationManager redo = manager.clone();
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
std::string ChatSession::fromEditor(const std::string& text) {
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
  // The editor starts with no signal blocked (the session blocks SIGINT: chat_interrupt.hpp).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  const int spawned =
      ::posix_spawn(&pid, "/bin/sh", nullptr, &attributes, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attributes);
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

// The branches of earlier sessions: stored forks named by /fork, /edit or /regenerate, and the
// threads /load made (tied to the session by their metadata, "branchOf"), with their forks.
void ChatSession::restoreBranches() {
  const std::string root = branches_.at("main").thread->threadId();
  std::vector<std::string> parents = {root};
  auto add = [&](const ThreadInfo& info) {
    parents.push_back(info.id);
    if (!info.metadata.is_object() || !info.metadata.contains("branch") ||
        !info.metadata["branch"].is_string()) {
      return;
    }
    const std::string name = info.metadata["branch"].get<std::string>();
    if (branches_.count(name)) return;
    ConversationManager manager(options_);
    auto thread = std::make_shared<StoredThread>(store_, info.id);
    thread->load(manager);
    branches_.emplace(name, Branch{std::move(manager), std::move(thread)});
  };
  for (const ThreadInfo& info : store_->listThreads()) {
    if (info.metadata.is_object() && info.metadata.value("branchOf", "") == root) add(info);
  }
  while (!parents.empty()) {
    const std::string parent = parents.back();
    parents.pop_back();
    ThreadListOptions list;
    list.parentId = parent;
    for (const ThreadInfo& info : store_->listThreads(list))
      add(info);
  }
}

// The session a branch's thread belongs to: its main thread, found through the forks' parents
// and the loaded branches' "branchOf". A thread that is no branch is its own session.
std::string ChatSession::sessionRoot(std::string id) {
  for (int depth = 0; depth < 10000; ++depth) {
    const std::optional<ThreadInfo> info = store_->threadInfo(id);
    if (!info || !info->metadata.is_object() || !info->metadata.contains("branch")) break;
    const std::string up =
        info->parentId.empty() ? info->metadata.value("branchOf", "") : info->parentId;
    if (up.empty()) break;
    id = up;
  }
  return id;
}

void ChatSession::applyOperation(const std::string& name, std::string argument) {
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
    // What the real run below does, the repairs of keepWellFormed() included.
    const ContextOperation op = parseContextOperation({{"operation", name}, {name, config}});
    const std::vector<Message> view = manager.getMessages();
    const ContextOperationPreview p =
        previewContextEdit(manager, name, [&](ConversationManager& trial) {
          applyContextOperation(trial, op);
          keepWellFormed(trial, view);
        });
    out_ << name << " (dry run, nothing changed): " << p.messagesAfter << " of " << p.messagesBefore
         << " messages would stay; prompt " << p.promptTokensBefore << " -> " << p.promptTokensAfter
         << " tokens (saves " << p.savedTokens << ")";
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
  ContextOperationResult result =
      applyContextOperation(manager, parseContextOperation({{"operation", name}, {name, config}}));
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
void ChatSession::keepWellFormed(ConversationManager& manager, const std::vector<Message>& before) {
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

void ChatSession::addBranch(const std::string& name, ConversationManager manager,
                            std::shared_ptr<StoredThread> thread) {
  branches_.emplace(name, Branch{std::move(manager), std::move(thread)});
  current_ = name;
}

std::string ChatSession::freshName(const std::string& stem) {
  for (int i = 1;; ++i) {
    std::string name = stem + "-" + std::to_string(i);
    if (!branches_.count(name)) return name;
  }
}

void ChatSession::fork(const std::string& argument) {
  ConversationManager& manager = current().manager;
  const std::string branchName = argument.empty() ? freshName("fork") : argument;
  if (branches_.count(branchName)) {
    throw ValidationError("/fork", "a branch named \"" + branchName + "\" exists");
  }
  ThreadOptions named;
  named.metadata = {{"branch", branchName}};
  if (!current().stored) save();  // the thread to fork from
  std::shared_ptr<StoredThread> thread = current().thread->fork(manager, named);
  const std::string threadId = thread->threadId();
  addBranch(branchName, manager.clone(), std::move(thread));
  out_ << "forked: now on " << branchName << " (thread " << threadId << ")\n";
}

void ChatSession::listBranches(const std::string&) {
  for (const auto& [branchName, branch] : branches_) {
    out_ << (branchName == current_ ? "* " : "  ") << branchName << "  thread "
         << branch.thread->threadId() << ", " << branch.manager.getMessageCount() << " messages\n";
  }
}

void ChatSession::switchBranch(const std::string& argument) {
  if (!branches_.count(argument)) {
    throw ValidationError("/switch", "no branch \"" + argument + "\" (see /branches)");
  }
  current_ = argument;
  out_ << "now on " << current_ << "\n";
}

void ChatSession::undo(const std::string&) {
  ConversationManager& manager = current().manager;
  std::vector<size_t>& undo = current().undo;
  const size_t batch = manager.getMarkMap().currentBatch;
  if (batch == 0) {
    out_ << "nothing to undo\n";
    return;
  }
  // An edit of an earlier session is undone one batch at a time.
  const size_t target = undo.empty() ? batch - 1 : undo.back();
  if (!undo.empty()) undo.pop_back();
  manager.rollbackToBatch(target);
  save();
  out_ << "undone: " << manager.getMessageCount() << " messages visible\n";
}

void ChatSession::clear(const std::string&) {
  ConversationManager& manager = current().manager;
  current().undo.push_back(manager.getMarkMap().currentBatch);
  manager.clearMessages(true);
  save();
  out_ << "cleared: " << manager.getMessageCount() << " messages visible\n";
}

void ChatSession::saveSnapshot(const std::string& argument) {
  if (argument.empty()) throw ValidationError("/save", "give a file: /save FILE");
  std::ofstream file(argument, std::ios::binary);
  file << current().manager.createSnapshot().dump(2) << "\n";
  if (!file) throw ValidationError(argument, "cannot write the file");
  out_ << "saved to " << argument << "\n";
}

void ChatSession::loadSnapshot(const std::string& argument) {
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
  ConversationManager loaded(options_);
  loaded.restoreFromSnapshot(snapshot);
  const std::string branchName = freshName("loaded");
  // A thread of its own, found again on resume through "branchOf" (restoreBranches()).
  Branch& main = branches_.at("main");
  if (!main.stored) {
    main.thread->attach(main.manager);
    main.stored = true;
  }
  ThreadOptions import;
  import.metadata = {{"branch", branchName}, { "branchOf", main.thread->threadId() }};
  const ThreadInfo info = importThread(*store_, snapshot, import);
  auto thread = std::make_shared<StoredThread>(store_, info.id);
  thread->load(loaded);
  addBranch(branchName, std::move(loaded), std::move(thread));
  out_ << "loaded " << argument << " as branch " << branchName << " (thread " << info.id << ")\n";
}

}  // namespace parley::cli
