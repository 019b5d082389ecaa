// `parley history`: the stored conversations (list, show, export, import, apply, rm).
//
// Every subcommand takes --db (FILE, sqlite://FILE or postgresql://...; default
// $XDG_DATA_HOME/parley/parley.db). A thread is shown as its visible view; export --format json
// prints the snapshot document (exportThread, stored_thread.hpp), which import takes back.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "cli_store.hpp"
#include "commands.hpp"
#include "endpoint.hpp"
#include "history_export.hpp"
#include "markdown.hpp"
#include "parley/context_ops.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/iso_time.hpp"
#include "parley/json.hpp"
#include "parley/protocol.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "prices_option.hpp"
#include "terminal.hpp"
#include "thread_title.hpp"

namespace parley::cli {
namespace {

struct HistoryArgs {
  std::string db;
  std::string id;
  std::string format = "json";
  std::string file;
  std::string newId;
  bool json = false;
  size_t limit = 0;
  std::string since;
  std::string model;
  std::string pricesFile;
  std::string title;
  bool generate = false;
  EndpointArgs endpoint;  // history title --generate
  bool repair = false;
  std::string query;
  size_t searchLimit = 20;
};

// To the second: what a person reads in a list.
std::string isoSeconds(std::chrono::system_clock::time_point at) {
  const std::string text = parley::isoTime(at);
  return text.substr(0, 19) + "Z";
}

nlohmann::json infoJson(const ThreadInfo& info) {
  return {{"id", info.id},
          {"parent_id", info.parentId},
          {"fork_position", info.forkPosition},
          {"message_count", info.messageCount},
          {"version", info.version},
          {"created_at", isoSeconds(info.createdAt)},
          {"updated_at", isoSeconds(info.updatedAt)},
          {"title", info.title}};
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValidationError(path, "cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parseJsonFile(const std::string& path) {
  try {
    return parseJson(readFile(path));
  } catch (const ProtocolError& e) {
    throw ValidationError(path, e.what());
  }
}

// A manager without a model. Made from ConversationOptions rather than default-constructed: a
// default-constructed manager has no token counter, and getTokenUsage() needs one.
ConversationManager plainManager() {
  return ConversationManager(ConversationOptions{});
}

void requireThread(ConversationStore& store, const std::string& id) {
  if (!store.threadInfo(id)) throw StoreError("no thread \"" + id + "\" in this store");
}

// For the commands that only read: the store opened read-only, with the thread they name.
std::shared_ptr<ConversationStore> readableStoreWith(const HistoryArgs& args) {
  auto store = openCliStoreForReading(args.db);
  if (!store) throw StoreError("no thread \"" + args.id + "\": nothing is stored yet");
  requireThread(*store, args.id);
  return store;
}

// One line per hit: thread, title, position, role, and the snippet with the matched words in
// bold on a terminal (in [brackets] elsewhere).
void search(const HistoryArgs& args) {
  auto store = openCliStore(args.db);  // for writing: an older database gets its search index
  MessageSearchOptions options;
  options.limit = args.searchLimit;
  const std::vector<MessageSearchHit> hits = store->searchMessages(args.query, options);
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const MessageSearchHit& hit : hits) {
      out.push_back({{"thread", hit.threadId},
                     {"position", hit.position},
                     {"role", std::string(toString(hit.role))},
                     {"snippet", hit.snippet}});
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  const bool bold = colorWanted("auto", STDOUT_FILENO);
  for (const MessageSearchHit& hit : hits) {
    std::string snippet = forTerminal(hit.snippet, STDOUT_FILENO);
    for (char& c : snippet) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    if (bold) {
      std::string styled;
      for (char c : snippet) {
        styled += c == '['   ? std::string("\033[1m")
                  : c == ']' ? std::string("\033[22m")
                             : std::string(1, c);
      }
      snippet = styled;
    }
    std::string title;
    if (auto info = store->threadInfo(hit.threadId); info && !info->title.empty()) {
      title = " \"" + forTerminal(info->title, STDOUT_FILENO) + "\"";
    }
    std::cout << hit.threadId << title << " #" << hit.position << " " << toString(hit.role) << ": "
              << snippet << "\n";
  }
  if (hits.empty()) std::cerr << "parley: no message matches\n";
}

// --since: a date, a UTC time, or a duration back from now (30m, 12h, 7d, 2w).
std::chrono::system_clock::time_point sinceTime(const std::string& text) {
  if (auto at = parseIsoTime(text)) return *at;
  static const std::regex duration(R"(([0-9]{1,6})([mhdw]))");
  std::smatch match;
  if (std::regex_match(text, match, duration)) {
    const int64_t n = std::stoll(match[1].str());
    const char unit = match[2].str()[0];
    const int64_t minutes = n * (unit == 'm' ? 1 : unit == 'h' ? 60 : unit == 'd' ? 1440 : 10080);
    return std::chrono::system_clock::now() - std::chrono::minutes(minutes);
  }
  throw ValidationError("--since",
                        "must be a date (2026-11-01), a UTC time (2026-11-01T12:00:00Z) or a "
                        "duration back from now (30m, 12h, 7d, 2w), got \"" +
                            text + "\"");
}

// Whether a reply's model is `wanted`: the same name, or a version of it: the name followed by a
// separator and a digit ("gpt-4o-mini" matches "gpt-4o-mini-2024-07-18", not "gpt-4o-mini-tts";
// "gpt-4o" does not match "gpt-4o-mini"), or by a tag after ':' or '@' ("llama3" matches
// "llama3:8b").
bool sameModel(const std::string& model, const std::string& wanted) {
  if (model == wanted) return true;
  if (model.size() <= wanted.size() + 1 || model.rfind(wanted, 0) != 0) return false;
  const char separator = model[wanted.size()];
  const char next = model[wanted.size() + 1];
  if (separator == ':' || separator == '@') return true;
  return std::string_view("-_./").find(separator) != std::string_view::npos &&
         std::isdigit(static_cast<unsigned char>(next));
}

// A listed thread with what its replies used and cost.
struct ListedThread {
  ThreadInfo info;
  std::string model;  // the last reply's ("" when no reply names one)
  ThreadCost cost;
};

// What the list shows of the first n messages of a thread.
struct PrefixSummary {
  ThreadCost cost;
  std::string model;          // the last reply's that names one
  bool modelMatches = false;  // a reply's model is --model's
};

void addCost(ThreadCost& total, const ThreadCost& more) {
  if (more.usd) total.usd = total.usd.value_or(0) + *more.usd;
  total.replies += more.replies;
  total.unpriced += more.unpriced;
  total.promptTokens += more.promptTokens;
  total.completionTokens += more.completionTokens;
}

// The list's summaries of every thread, each thread read once at most: a thread whose fork
// (or fork of a fork...) starts at its end is the start of that fork's messages, so one read of
// the last thread of such a chain summarises every thread on it. A chain of 10 000 forks is then
// one read (that walks the chain once), not 10 000 reads of 5 000 forks each.
class ThreadSummaries {
 public:
  ThreadSummaries(ConversationStore& store, const std::vector<ThreadInfo>& threads,
                  const PriceTable& prices, const std::string& model)
      : store_(store), prices_(prices), model_(model) {
    for (const ThreadInfo& info : threads)
      byId_.emplace(info.id, &info);
    for (const ThreadInfo& info : threads) {
      auto parent = byId_.find(info.parentId);
      if (info.parentId.empty() || parent == byId_.end()) continue;
      if (info.forkPosition == parent->second->messageCount)
        continuation_.emplace(info.parentId, info.id);
    }
  }

  const PrefixSummary& of(const ThreadInfo& info) {
    const std::string& tip = tipOf(info.id);
    auto prefixes = prefixes_.find(tip);
    if (prefixes == prefixes_.end()) prefixes = prefixes_.emplace(tip, summarise(tip)).first;
    const std::vector<PrefixSummary>& all = prefixes->second;
    const auto n = static_cast<std::size_t>(std::max<int64_t>(info.messageCount, 0));
    return all[std::min(n, all.size() - 1)];
  }

 private:
  // The last thread of the chain of forks at the end starting at `id`; every thread walked is
  // remembered, so all the calls together walk each chain once. Bounded by the number of
  // threads even if the store's fork links loop (a damaged database).
  const std::string& tipOf(const std::string& id) {
    std::vector<std::string> path;
    std::string at = id;
    while (!tips_.count(at)) {
      path.push_back(at);
      auto next = continuation_.find(at);
      if (next == continuation_.end() || path.size() > byId_.size()) break;
      at = next->second;
    }
    const std::string tip = tips_.count(at) ? tips_.at(at) : at;
    for (const std::string& walked : path)
      tips_[walked] = tip;
    return tips_.at(id);
  }

  std::vector<PrefixSummary> summarise(const std::string& id) {
    const std::vector<Message> messages = store_.loadThread(id).messages;
    std::vector<PrefixSummary> out(1);
    out.reserve(messages.size() + 1);
    for (const Message& m : messages) {
      PrefixSummary next = out.back();
      addCost(next.cost, threadCost(std::span<const Message>(&m, 1), prices_));
      if (m.role == Role::Assistant && !m.model.empty()) {
        next.model = m.model;
        next.modelMatches = next.modelMatches || (!model_.empty() && sameModel(m.model, model_));
      }
      out.push_back(std::move(next));
    }
    return out;
  }

  ConversationStore& store_;
  const PriceTable& prices_;
  const std::string& model_;
  std::unordered_map<std::string, const ThreadInfo*> byId_;
  std::unordered_map<std::string, std::string> continuation_;  // thread -> a fork at its end
  std::unordered_map<std::string, std::string> tips_;
  std::unordered_map<std::string, std::vector<PrefixSummary>> prefixes_;  // by tip
};

void list(const HistoryArgs& args) {
  std::optional<std::chrono::system_clock::time_point> since;
  if (!args.since.empty()) since = sinceTime(args.since);
  // Read before the store: a bad price file is reported whatever is stored.
  const PriceTable prices = cliPriceTable(args.pricesFile, defaultConfigFile());
  auto store = openCliStoreForReading(args.db);
  auto threads = store ? store->listThreads() : std::vector<ThreadInfo>{};
  // Newest first: the thread a user looks for is usually the one they used last. Ties keep the
  // store's order reversed, so the thread made last wins.
  std::reverse(threads.begin(), threads.end());
  std::stable_sort(threads.begin(), threads.end(), [](const ThreadInfo& a, const ThreadInfo& b) {
    return a.updatedAt > b.updatedAt;
  });
  std::vector<ListedThread> listed;
  std::optional<ThreadSummaries> summaries;
  if (store) summaries.emplace(*store, threads, prices, args.model);
  for (const ThreadInfo& info : threads) {
    if (args.limit > 0 && listed.size() >= args.limit) break;
    if (since && info.updatedAt < *since) continue;
    const PrefixSummary& summary = summaries->of(info);
    if (!args.model.empty() && !summary.modelMatches) continue;
    listed.push_back({info, summary.model, summary.cost});
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ListedThread& t : listed) {
      nlohmann::json item = infoJson(t.info);
      item["model"] = t.model.empty() ? nlohmann::json() : nlohmann::json(t.model);
      item["prompt_tokens"] = t.cost.promptTokens;
      item["completion_tokens"] = t.cost.completionTokens;
      item["replies_with_usage"] = t.cost.replies;
      item["unpriced_replies"] = t.cost.unpriced;
      // null when no reply is priced: unpriced is not free.
      item["cost_usd"] = t.cost.usd ? nlohmann::json(*t.cost.usd) : nlohmann::json();
      out.push_back(std::move(item));
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  for (const ListedThread& t : listed) {
    const ThreadInfo& info = t.info;
    std::cout << info.id << "  " << info.messageCount << " messages  updated "
              << isoSeconds(info.updatedAt);
    if (!t.model.empty()) std::cout << "  " << forTerminal(t.model, STDOUT_FILENO);
    if (t.cost.replies > 0) {
      std::cout << "  " << t.cost.promptTokens + t.cost.completionTokens << " tokens  "
                << formatThreadCost(t.cost);
    }
    if (!info.parentId.empty()) {
      std::cout << "  fork of " << info.parentId << " at " << info.forkPosition;
    }
    if (!info.title.empty()) std::cout << "  " << forTerminal(info.title, STDOUT_FILENO);
    std::cout << "\n";
  }
}

// The title a thread was given, else its id.
std::string threadTitle(ConversationStore& store, const std::string& id) {
  auto info = store.threadInfo(id);
  return info && !info->title.empty() ? info->title : id;
}

void show(const HistoryArgs& args) {
  auto store = readableStoreWith(args);
  ConversationManager manager = plainManager();
  loadConversation(*store, args.id, manager);
  const PriceTable prices = cliPriceTable(args.pricesFile, defaultConfigFile());
  std::cout << renderMarkdown(threadTitle(*store, args.id), manager, prices,
                              /*includeHidden=*/false);
}

void exportThreadCommand(const HistoryArgs& args) {
  auto store = readableStoreWith(args);
  if (args.format == "json") {
    std::cout << exportThread(*store, args.id).dump(2) << "\n";
    return;
  }
  ConversationManager manager = plainManager();
  loadConversation(*store, args.id, manager);
  const PriceTable prices = cliPriceTable(args.pricesFile, defaultConfigFile());
  if (args.format == "markdown") {
    std::cout << renderMarkdown(threadTitle(*store, args.id), manager, prices,
                                /*includeHidden=*/true);
  } else if (args.format == "html") {
    std::cout << renderHtml(threadTitle(*store, args.id), args.id, manager, prices);
  } else {
    throw ValidationError("--format", "must be json, markdown or html");
  }
}

// Why a view entry breaks tool-call pairing (context_ops.hpp), for a person fixing the file.
std::string pairingProblem(const MessageStore& store, MessageStore::Index index) {
  const Message& m = store.stored(index);
  if (m.role == Role::Tool) {
    return "a tool message (tool_call_id \"" + m.toolCallId +
           "\") that answers no call of the assistant message before it";
  }
  if (m.role == Role::Assistant && !m.toolCalls.empty()) {
    return "an assistant message whose tool calls (the first is \"" + m.toolCalls.front().id +
           "\") are not all followed by their results";
  }
  return "a message that breaks tool-call pairing";
}

void importCommand(const HistoryArgs& args) {
  nlohmann::json snapshot = parseJsonFile(args.file);
  // Every model API refuses a history with a tool message that answers no call, or a tool call
  // without its result: check the view that would be sent before storing it.
  ConversationManager manager = plainManager();
  manager.restoreFromSnapshot(snapshot);
  const MessageStore view = manager.store();
  const std::vector<MessageStore::Index> broken = pairingViolations(view, view.view().toVector());
  if (!broken.empty()) {
    if (!args.repair) {
      throw ValidationError(args.file + ": messages[" + std::to_string(broken.front()) + "]",
                            pairingProblem(view, broken.front()) +
                                "; a model API refuses such a history (--repair hides the "
                                "broken tool-call groups)");
    }
    // An empty filter keeps everything and then drops what breaks pairing, as a new batch:
    // storage keeps every message of the file.
    const ContextOperationResult result = applyContextOperation(manager, FilterOp{});
    snapshot = manager.createSnapshot();
    std::cerr << "parley: repaired: " << result.removedForPairing
              << " message(s) hidden to keep tool calls paired\n";
  }
  auto store = openCliStore(args.db);
  ThreadOptions options;
  options.id = args.newId;
  std::cout << importThread(*store, snapshot, options).id << "\n";
}

void apply(const HistoryArgs& args) {
  nlohmann::json ops = parseJsonFile(args.file);
  if (!ops.is_array()) ops = nlohmann::json::array({ops});
  std::vector<ContextOperation> parsed;
  for (size_t i = 0; i < ops.size(); ++i) {
    try {
      parsed.push_back(parseContextOperation(ops[i]));
    } catch (const ValidationError& e) {
      throw ValidationError(args.file + "[" + std::to_string(i) + "]", e.what());
    }
  }
  auto store = openCliStore(args.db);
  requireThread(*store, args.id);
  StoredThread thread(store, args.id);
  ConversationManager manager = plainManager();
  thread.load(manager);
  for (const auto& op : parsed) {
    ContextOperationResult result = applyContextOperation(manager, op);
    std::cout << result.operation << ": " << result.messageCount << " messages visible";
    if (result.removedForPairing) {
      std::cout << " (" << result.removedForPairing << " dropped to keep tool calls paired)";
    }
    std::cout << "\n";
  }
  thread.save(manager);
}

// A title given, or one the model proposes from the thread's text (thread_title.hpp).
void retitle(const HistoryArgs& args) {
  if (args.generate == !args.title.empty()) {
    throw ValidationError("title", "give either a TITLE or --generate");
  }
  auto store = openCliStore(args.db);
  requireThread(*store, args.id);
  std::string title = args.title;
  if (args.generate) {
    auto client = makeClient(resolveEndpoint(args.endpoint));
    title = proposeTitle(*client, "", store->loadThread(args.id).messages);
  }
  if (!store->setThreadTitle(args.id, title)) throw StoreError("no thread \"" + args.id + "\"");
  std::cout << title << "\n";
}

void remove(const HistoryArgs& args) {
  auto store = openCliStore(args.db);
  if (!store->deleteThread(args.id)) throw StoreError("no thread \"" + args.id + "\"");
  std::cout << "deleted " << args.id << "\n";
}

// Runs `body`, mapping failures to exit codes as the other commands do.
int guarded(const std::function<void()>& body) {
  try {
    body();
    return kExitOk;
  } catch (const ValidationError& e) {
    std::cerr << "parley: " << e.what() << "\n";
    return exitCodeOf(e);
  } catch (const Error& e) {
    std::cerr << "parley: error: " << e.what() << "\n";
    return exitCodeOf(e);
  }
}

}  // namespace

void addHistoryCommand(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<HistoryArgs>();
  CLI::App* cmd = app.add_subcommand("history",
                                     "List, show, export, import, edit and delete "
                                     "stored conversations");
  cmd->require_subcommand(1);
  auto addDb = [&](CLI::App* sub) {
    sub->add_option("--db", args->db,
                    "Conversation store: FILE, sqlite://FILE or postgresql://... (default: "
                    "$XDG_DATA_HOME/parley/parley.db, else ~/.local/share/parley/parley.db)");
  };
  auto run = [args, &exitCode](void (*body)(const HistoryArgs&)) {
    return [args, &exitCode, body] { exitCode = guarded([&] { body(*args); }); };
  };

  CLI::App* listCmd =
      cmd->add_subcommand("list", "List the stored threads, the one used last first");
  addDb(listCmd);
  listCmd->add_option("--limit", args->limit, "Show at most this many threads (0: all)");
  listCmd->add_option("--since", args->since,
                      "Only threads used since a date (2026-11-01), a UTC time "
                      "(2026-11-01T12:00:00Z) or a duration back from now (30m, 12h, 7d, 2w)");
  listCmd->add_option(
      "--model", args->model,
      "Only threads with a reply from this model or a version of it (NAME-2024..., NAME:tag)");
  addPricesOption(*listCmd, args->pricesFile);
  listCmd->add_flag("--json", args->json, "Print a JSON array of thread descriptions");
  listCmd->callback(run(&list));

  CLI::App* searchCmd = cmd->add_subcommand(
      "search", "Find the stored messages that hold every word of QUERY (best matches first)");
  addDb(searchCmd);
  searchCmd->add_option("query", args->query, "The words to find (case and accents ignored)")
      ->required();
  searchCmd->add_option("--limit", args->searchLimit, "At most this many hits (1..1000)")
      ->capture_default_str();
  searchCmd->add_flag("--json", args->json, "Print a JSON array of hits");
  searchCmd->callback(run(&search));

  CLI::App* showCmd = cmd->add_subcommand("show", "Print a thread's visible messages");
  addDb(showCmd);
  showCmd->add_option("id", args->id, "Thread id")->required();
  addPricesOption(*showCmd, args->pricesFile);
  showCmd->callback(run(&show));

  CLI::App* exportCmd = cmd->add_subcommand("export", "Print a thread as JSON, Markdown or HTML");
  addDb(exportCmd);
  exportCmd->add_option("id", args->id, "Thread id")->required();
  exportCmd
      ->add_option("--format", args->format,
                   "json: the snapshot document (messages in OpenAI format; `import` reads it); "
                   "markdown: readable turns; html: one self-contained page")
      ->check(CLI::IsMember({"json", "markdown", "html"}))
      ->capture_default_str();
  addPricesOption(*exportCmd, args->pricesFile);
  exportCmd->callback(run(&exportThreadCommand));

  CLI::App* importCmd = cmd->add_subcommand("import", "Store a snapshot document as a new thread");
  addDb(importCmd);
  importCmd->add_option("file", args->file, "Snapshot JSON (as `export --format json` prints)")
      ->required();
  importCmd->add_option("--id", args->newId, "Id of the new thread (default: generated)");
  importCmd->add_flag("--repair", args->repair,
                      "Hide tool-call groups that a model API would refuse (a tool message "
                      "answering no call, a call without its result) instead of refusing the file");
  importCmd->callback(run(&importCommand));

  CLI::App* applyCmd =
      cmd->add_subcommand("apply",
                          "Run context operations (truncate, insert, replace, clear, "
                          "filter) on a stored thread and save it");
  addDb(applyCmd);
  applyCmd->add_option("id", args->id, "Thread id")->required();
  applyCmd
      ->add_option("ops", args->file,
                   "JSON file: one operation or an array, e.g. {\"operation\": \"truncate\", "
                   "\"truncate\": {\"keepLast\": 4}}")
      ->required();
  applyCmd->callback(run(&apply));

  CLI::App* titleCmd = cmd->add_subcommand(
      "title", "Give a thread a title, or with --generate let the model propose one");
  addDb(titleCmd);
  titleCmd->add_option("id", args->id, "Thread id")->required();
  titleCmd->add_option("title", args->title, "The new title (one line)");
  titleCmd->add_flag("--generate", args->generate,
                     "Ask the model for a short title from the thread's text (the endpoint "
                     "options below choose the model)");
  addEndpointOptions(*titleCmd, args->endpoint);
  titleCmd->callback(run(&retitle));

  CLI::App* rmCmd = cmd->add_subcommand("rm", "Delete a thread (its forks keep working)");
  addDb(rmCmd);
  rmCmd->add_option("id", args->id, "Thread id")->required();
  rmCmd->callback(run(&remove));
}

}  // namespace parley::cli
