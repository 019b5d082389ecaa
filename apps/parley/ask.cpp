// `parley ask`: one prompt, one turn, the reply on stdout.
//
// The endpoint comes from --profile (a [profiles.NAME] table of the config file), else from
// --base-url / OPENAI_BASE_URL; --base-url, --model and --api-key override a profile's values.
// The key defaults to OPENAI_API_KEY. With tools (--tools demo, --tools-file FILE) the turn is
// ConversationManager::run's tool loop (at most --max-iterations model calls; tool activity on
// stderr); without tools it is one model call and tool calls the model makes are printed, not
// run. The prompt is the argument, then text piped on stdin, then the files of -f; --attach adds
// files as message parts (images, audio, documents: docs/parts.md).
// Every turn is saved (in --db, default the user's database) when it completes: to a new thread
// titled after the prompt, to --thread ID, or with -c to the thread used last; --no-save keeps
// nothing. A failed turn leaves the store as it was. -t NAME takes options from a template of the
// config file (template_config.hpp); --save-template NAME writes them as one. --json adds the
// turn's cost, priced with prices_option.hpp's table as the model asked for (null: unpriced).
// --schema asks for a structured answer (docs/structured-output.md): the JSON value, valid
// against the schema, alone on stdout; exit code 3 when none came within the repairs.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cli_store.hpp"
#include "commands.hpp"
#include "demo_tools.hpp"
#include "endpoint.hpp"
#include "extras.hpp"
#include "markdown.hpp"
#include "mcp_config.hpp"
#include "parley/conversation_manager.hpp"
#include "parley/errors.hpp"
#include "parley/openai_client.hpp"
#include "parley/part.hpp"
#include "parley/prompt_counter.hpp"
#include "parley/protocol.hpp"
#include "parley/server_tools.hpp"
#include "parley/store.hpp"
#include "parley/stored_thread.hpp"
#include "parley/structured_output.hpp"
#include "parley/telemetry.hpp"
#include "parley/turn_defaults.hpp"
#include "prices_option.hpp"
#include "prompt_input.hpp"
#include "template_config.hpp"
#include "terminal.hpp"
#include "tool_file.hpp"

namespace parley::cli {
namespace {

// A new thread's id in the store's own form ("t-" + 32 hex digits), chosen before the turn so
// that the thread is made only when the turn is saved.
std::string newThreadId() {
  std::random_device random;
  std::string id = "t-";
  for (int i = 0; i < 32; ++i)
    id += "0123456789abcdef"[random() % 16];
  return id;
}

struct AskArgs {
  EndpointArgs endpoint;
  bool stream = true;
  int maxIterations = 10;
  std::vector<std::string> toolSets;
  std::vector<std::string> toolFiles;
  std::vector<std::string> mcpServers;
  std::vector<std::string> a2aAgents;
  std::string system;
  std::string db;
  std::string thread;
  bool continueLast = false;
  bool noSave = false;
  std::vector<std::string> files;
  std::vector<std::string> attachments;
  bool threadGiven = false;
  std::optional<int64_t> timeoutMs;  // none: no bound
  bool json = false;
  std::string prompt;
  std::string templateName;
  std::string saveTemplateName;
  std::string format;  // text | markdown | json; "": text on a terminal, else markdown
  std::string color = "auto";
  std::string pricesFile;
  double maxCost = -1;     // USD; < 0: no budget
  std::string schema;      // --schema: a file, JSON text or the concise form
  std::string saveImages;  // --save-images: where the reply's generated images are written
};

// Writes the turn's generated images into `dir` as image-N.EXT (N: the first numbers free) and
// says where each went; without a directory, says how many there are and how to keep them.
void reportImages(const std::vector<Part>& images, const std::string& dir) {
  if (images.empty()) return;
  std::cout << std::flush;
  if (dir.empty()) {
    std::cerr << "parley: the reply holds " << images.size() << " generated image"
              << (images.size() == 1 ? "" : "s") << " (" << images[0].mimeType << ", "
              << images[0].bytes.size() << " bytes" << (images.size() == 1 ? "" : ", ...")
              << "); keep them with --save-images DIR\n";
    return;
  }
  std::filesystem::create_directories(dir);
  int n = 1;
  for (const Part& image : images) {
    std::string ext = image.mimeType.substr(image.mimeType.find('/') + 1);
    if (ext == "jpeg") ext = "jpg";
    std::filesystem::path path;
    do {
      path = std::filesystem::path(dir) / ("image-" + std::to_string(n++) + "." + ext);
    } while (std::filesystem::exists(path));
    std::ofstream out(path, std::ios::binary);
    out << image.bytes;
    if (!out.flush()) throw ValidationError("--save-images", "cannot write " + path.string());
    std::cerr << "parley: image saved to " << path.string() << " (" << image.mimeType << ", "
              << image.bytes.size() << " bytes)\n";
  }
}

// --schema's value: a file holding a JSON Schema, JSON text, or the concise form
// ("name, age int, bio: a short bio").
nlohmann::json schemaOption(const std::string& value) {
  std::error_code error;
  const bool isFile = value.find_first_of("{,\n") == std::string::npos &&
                      std::filesystem::is_regular_file(value, error);
  try {
    if (isFile) return parseSchemaText(readPartFile(value, kMaxStructuredSchemaBytes));
    return parseSchemaText(value);
  } catch (const ValidationError& e) {
    throw ValidationError("--schema", e.what());
  }
}

// Ctrl-C cancels the turn: the handler only writes a byte to a pipe (what a handler may do), and
// a thread blocked on the pipe turns it into a stop. It sleeps until then (no polling), and the
// process ends as soon as the turn does (it once waited up to 20 ms for a polling watcher).
int interruptPipe[2] = {-1, -1};

void onSigint(int) {
  const char byte = 'i';
  (void)!::write(interruptPipe[1], &byte, 1);
}

class InterruptWatcher {
 public:
  explicit InterruptWatcher(std::stop_source& stop) {
    if (::pipe2(interruptPipe, O_CLOEXEC) != 0) throw Error("cannot create a pipe for Ctrl-C");
    thread_ = std::thread([&stop] {
      char byte = 0;
      while (::read(interruptPipe[0], &byte, 1) < 0 && errno == EINTR) {
      }
      if (byte == 'i') stop.request_stop();
    });
    previous_ = std::signal(SIGINT, onSigint);
  }
  ~InterruptWatcher() {
    restore();
    const char byte = 'e';  // the turn is over: the thread ends
    (void)!::write(interruptPipe[1], &byte, 1);
    thread_.join();
    ::close(interruptPipe[0]);
    ::close(interruptPipe[1]);
  }
  InterruptWatcher(const InterruptWatcher&) = delete;
  InterruptWatcher& operator=(const InterruptWatcher&) = delete;

  // Ctrl-C does what it did before (ends the process, usually) from now on.
  void restore() { std::signal(SIGINT, previous_); }

 private:
  std::thread thread_;
  void (*previous_)(int) = SIG_DFL;
};

int runAsk(const AskArgs& given) {
  AskArgs args = given;
  if (args.json && !args.format.empty() && args.format != "json") {
    throw ValidationError("--json", "cannot go with --format " + args.format);
  }
  if (!args.schema.empty() && (args.json || !args.format.empty())) {
    throw ValidationError("--schema",
                          "prints the JSON answer alone; it cannot go with --json or "
                          "--format");
  }
  if (args.json) args.format = "json";
  args.format = replyFormat(args.format, STDOUT_FILENO, "--format");
  args.json = args.format == "json";
  std::optional<LiveMarkdown> rendered;  // --format text; on a terminal the line in progress too
  if (args.format == "text") {
    const size_t width = terminalWidth(STDOUT_FILENO);
    rendered.emplace(MarkdownStyle{.color = colorWanted(args.color, STDOUT_FILENO), .width = width},
                     ::isatty(STDOUT_FILENO) ? width : 0);
  } else {
    colorWanted(args.color, STDOUT_FILENO);  // a bad --color is an error whatever the format
  }
  PromptTemplate used;
  const TemplatedOptions templated{&args.endpoint, &args.system, &args.toolSets, &args.toolFiles,
                                   &args.mcpServers};
  if (!args.templateName.empty()) {
    used = readTemplate(configFile(args.endpoint), args.templateName);
    applyTemplate(used, templated);
  }
  if (!args.saveTemplateName.empty()) {
    const std::string file = configFile(args.endpoint);
    saveTemplate(file, templateOf(args.saveTemplateName, used, templated));
    std::cerr << "parley: saved template " << args.saveTemplateName << " in " << file << "\n";
  }
  // Without tools a turn is one model call, within any bound of at least 1: scripts pass
  // --max-iterations whether or not they offer tools.
  if (args.maxIterations < 1) throw ValidationError("--max-iterations", "must be at least 1");
  // 0 and negatives used to mean "no bound" without a word; leaving the option out says that.
  if (args.timeoutMs && *args.timeoutMs < 1) {
    throw ValidationError("--timeout", "must be at least 1 (ms); leave it out for no bound");
  }
  if (args.threadGiven && args.thread.empty()) {
    throw ValidationError("--thread", "needs a thread id (leave --thread out to start a new one)");
  }
  if (args.continueLast && !args.thread.empty()) {
    throw ValidationError("-c", "continues the thread used last; it cannot go with --thread");
  }
  if (args.noSave && (args.continueLast || !args.thread.empty() || !args.db.empty())) {
    throw ValidationError("--no-save", "cannot go with -c, --thread or --db");
  }
  if (std::error_code ec; !args.saveImages.empty() &&
                          std::filesystem::exists(args.saveImages, ec) &&
                          !std::filesystem::is_directory(args.saveImages, ec)) {
    throw ValidationError("--save-images", args.saveImages + " is not a directory");
  }
  std::vector<std::string> skipped;
  const std::string files = filesAsText(args.files, skipped);
  for (const std::string& path : skipped)
    std::cerr << "parley: note: skipped the binary file " << path << "\n";
  // Attachments are read first: "--attach -" takes stdin, which then adds no text.
  std::vector<Part> attachments = attachmentParts(args.attachments);
  const bool stdinAttached =
      std::find(args.attachments.begin(), args.attachments.end(), "-") != args.attachments.end();
  const std::string input =
      composePrompt(args.prompt, stdinAttached ? std::string() : readPipedStdin(), files);
  if (input.empty() && attachments.empty()) {
    if (!args.saveTemplateName.empty()) return kExitOk;  // only saving the template
    throw ValidationError("prompt", "give a prompt, pipe text in, or add files with -f");
  }
  const std::string prompt = input.empty() ? std::string() : fillPrompt(used.prompt, input);
  std::optional<nlohmann::json> schema;
  if (!args.schema.empty()) {
    if (!args.toolSets.empty() || !args.toolFiles.empty() || !args.mcpServers.empty()) {
      throw ValidationError("--schema",
                            "a structured answer offers no tools; leave out --tools, "
                            "--tools-file and --mcp");
    }
    if (!attachments.empty()) {
      throw ValidationError("--schema", "cannot go with --attach (a structured prompt is text)");
    }
    schema = schemaOption(args.schema);
  }
  const Message promptMessage = cli::promptMessage(prompt, std::move(attachments));
  // Nothing configured: the built-in mock's demo agent answers, offline, as in `parley chat`.
  std::shared_ptr<void> demo;  // the mock of parley-extras.so (extras.hpp)
  EndpointArgs endpoint = args.endpoint;
  if (!endpointConfigured(args.endpoint)) {
    demo = extras().startDemoAgent(endpoint.baseUrl);
    if (args.toolSets.empty() && args.toolFiles.empty() && args.mcpServers.empty() && !schema)
      args.toolSets.push_back("demo");
    std::cerr << "parley: no endpoint configured; the built-in mock's demo agent answers "
                 "(offline; give --base-url, --profile or OPENAI_API_KEY for a model)\n";
  }
  auto tools = makeToolRegistry(args.toolSets, args.toolFiles);
  addMcpServers(*tools, args.mcpServers, configFile(args.endpoint), std::cerr,
                args.json ? nullptr : &std::cerr);
  addA2aAgents(*tools, args.a2aAgents, configFile(args.endpoint));
  const bool loop = tools->size() > 0;

  ClientOptions client = resolveEndpoint(endpoint);
  addParameters(used, client);
  // The prices, when the turn is priced: its cost printed (--json), a budget (--max-cost), spans
  // (parley.cost.usd), a --prices file (checked before the call, so a bad one costs nothing).
  // Otherwise nothing reads them: parsing the shipped table was a tenth of a plain ask's start-up.
  std::shared_ptr<const PriceTable> prices;
  if (args.json || args.maxCost >= 0 || !args.pricesFile.empty() || telemetry()) {
    prices = std::make_shared<const PriceTable>(
        cliPriceTable(args.pricesFile, configFile(args.endpoint)));
  }
  TurnDefaults turn;
  turn.systemPrompt = args.system;
  turn.maxIterations = args.maxIterations;
  if (args.timeoutMs) {
    // The whole turn: a tool that outlives it is stopped, and the turn fails with a timeout. A
    // value past the longest a turn may be given (about 23 days) means "practically forever".
    turn.callTimeout =
        std::min(std::chrono::milliseconds(*args.timeoutMs), TurnDefaults::kMaxTimeout);
    turn.turnTimeout = turn.callTimeout;
  }
  // Prices the telemetry spans too (parley.cost.usd); without a limit nothing is checked.
  turn.budget.prices = prices;
  // Checked before every model call of the turn: nothing is sent that could go over.
  if (args.maxCost >= 0) turn.budget.maxCostPerRun = args.maxCost;
  ConversationOptions options = configureConversation(client, makeClient(client), tools, turn);
  options.stream = args.stream;
  // A long call's progress (a remote agent working) on stderr, beside the [tool] lines.
  static std::mutex progressLines;
  if (!args.json) showToolProgress(options, std::cerr, STDERR_FILENO, progressLines);
  ConversationManager manager(options);

  // The turn is saved only when it completes, in one transaction, so the thread only ever holds
  // whole turns; a new thread is made by that transaction, so a turn that fails or is killed
  // (SIGINT, SIGTERM) leaves no empty thread behind.
  std::optional<StoredThread> stored;
  std::shared_ptr<ConversationStore> store;
  bool resumed = false;
  bool created = false;
  ThreadOptions newThread;
  if (!args.noSave) {
    store = openCliStore(args.db);
    std::string id = args.thread;
    if (args.continueLast) {
      id = mostRecentThread(*store);
      if (id.empty()) throw ValidationError("-c", "there is no stored thread to continue");
    }
    if (id.empty()) {
      id = newThreadId();
      newThread.title = titleFromPrompt(input.empty() ? args.attachments.front() : input);
    }
    created = !store->threadInfo(id);
    stored.emplace(store, id);
    if (!created) resumed = stored->attach(manager);
    if (resumed && !args.system.empty()) {
      auto first = manager.getMessages();
      if (first.empty() || first.front().role != Role::System ||
          first.front().content != args.system) {
        std::cerr << "parley: note: --system is ignored: thread " << id
                  << " already exists and keeps its own system prompt\n";
      }
    }
  }

  RunOptions run = turnRunOptions(turn);
  if (stored) run.conversationId = stored->threadId();  // gen_ai.conversation.id
  if (loop) run.toolTape = toolTapeFor(args.endpoint);  // --record / --replay: the tools too
  bool printedText = false;
  bool atLineStart = true;
  TerminalFilter toStdout(STDOUT_FILENO);
  run.onChunk = [&](const StreamDelta& delta) {
    if (!args.json && !delta.content.empty()) {
      const std::string text = toStdout(delta.content);
      std::cout << (rendered ? rendered->feed(text) : text) << std::flush;
      printedText = true;
      atLineStart = delta.content.back() == '\n';
    }
    return true;
  };
  run.onToolCall = [&](const ToolCall& call) {
    if (rendered) std::cout << rendered->finish();
    if (!atLineStart) std::cout << "\n" << std::flush;
    atLineStart = true;
    if (!args.json) std::cerr << toolCallLine(call, STDERR_FILENO) << "\n";
  };
  run.onToolResult = [&](const ToolResult& result) {
    if (!args.json) std::cerr << toolResultLine(result, STDERR_FILENO) << "\n";
  };

  std::stop_source stop;
  run.stopToken = stop.get_token();
  InterruptWatcher watcher(stop);

  Message reply;
  std::string finishReason;
  std::optional<TokenUsage> usage;
  const size_t viewBefore = manager.getMessages().size();
  std::optional<double> cost;            // the turn's replies, priced as the model asked for
  std::optional<CacheDiagnostic> cache;  // the first call against the thread's previous request
  std::optional<TokenUsage> firstUsage;  // the first call's, which the diagnostic predicts
  std::vector<Part> images;              // generated by the turn's replies
  std::optional<nlohmann::json> answer;  // --schema
  try {
    if (schema) {
      StructuredOptions structured;
      structured.timeout = run.timeout;
      structured.stopToken = run.stopToken;
      StructuredResult result = manager.runStructuredResult(prompt, *schema, structured);
      answer = std::move(result.value);
      reply = result.message;
      finishReason = "stop";
      usage = result.usage;
    } else if (loop) {
      RunResult result = manager.run(std::vector<Message>{promptMessage}, run);
      cache = result.cache;
      reply = result.message;
      finishReason = result.finishReason;
      usage = result.usage;
    } else {
      // No tools: one model call; tool calls the model makes anyway are printed, not run.
      manager.addMessage(promptMessage);
      cache = manager.diagnoseCache();
      ChatResult result = manager.executeLlmCall(run);
      // The calls are printed, not run. Each gets a result saying so: a call without a result
      // would make the stored thread one that no model accepts a next turn of.
      for (const ToolCall& call : result.message.toolCalls)
        manager.addMessage(Message::tool(call.id, "error: not run (this turn offered no tools)"));
      reply = result.message;
      finishReason = result.finishReason;
      usage = result.usage;
    }
    const std::vector<Message> view = manager.getMessages();
    for (size_t i = std::min(viewBefore, view.size()); i < view.size() && !firstUsage; ++i) {
      if (view[i].role == Role::Assistant) firstUsage = view[i].usage;
    }
    if (prices)
      cost = prices->cost(client.model, std::span(view).subspan(std::min(viewBefore, view.size())));
    for (size_t i = std::min(viewBefore, view.size()); i < view.size(); ++i) {
      for (Part& image : generatedImagesOf(view[i]))
        images.push_back(std::move(image));
    }
    if (stored && created) {
      stored->attach(manager, newThread);  // makes the thread with the whole turn
    } else if (stored) {
      stored->save(manager);
    }
  } catch (const CancelledError&) {
    watcher.restore();
    if (printedText) std::cout << (rendered ? rendered->finish() : std::string()) << "\n";
    std::cerr << "parley: interrupted\n";
    return kExitInterrupted;
  } catch (const RefusalError& e) {
    // Its own outcome: the provider's explanation, on stdout with --json, and exit code 4.
    watcher.restore();
    if (printedText) std::cout << (rendered ? rendered->finish() : std::string()) << "\n";
    if (args.json) {
      std::cout << nlohmann::json{{"message", nullptr},
                                  {"finish_reason", "refusal"},
                                  {"refusal", e.explanation()},
                                  {"partial_text", e.partialText()}}
                       .dump()
                << "\n";
    }
    std::cerr << "parley: the model refused: "
              << forTerminal(preview(e.explanation(), std::string::npos), STDERR_FILENO) << "\n";
    return exitCodeOf(e);
  } catch (const Error& e) {
    watcher.restore();
    if (printedText) std::cout << (rendered ? rendered->finish() : std::string()) << "\n";
    std::cerr << "parley: error: "
              << forTerminal(preview(e.what(), std::string::npos), STDERR_FILENO) << "\n";
    return exitCodeOf(e);
  }
  watcher.restore();
  if (answer) {
    std::cout << answer->dump() << "\n";
    return kExitOk;
  }
  // After the reply, so a terminal shows the note on a line of its own. Said when the user
  // chose the store, or is at a terminal; a script that did not ask is not told every time.
  const auto noteNewThread = [&] {
    if (!created || (args.db.empty() && !::isatty(STDERR_FILENO))) return;
    std::cout << std::flush;
    std::cerr << "parley: saved as thread " << stored->threadId()
              << " (continue with: parley ask -c" << (args.db.empty() ? "" : " --db " + args.db)
              << " PROMPT)\n";
  };

  if (args.json) {
    // The message as the Chat Completions API has it: usage is printed beside it; the stored
    // model and time of the reply are not part of that format.
    reply.usage.reset();
    reply.model.clear();
    reply.receivedAt.reset();
    nlohmann::json out = {{"message", toJson(reply)},
                          {"finish_reason", finishReason},
                          {"usage", usage ? toJson(*usage) : nlohmann::json()},
                          {"cost_usd", cost && usage ? nlohmann::json(*cost) : nlohmann::json()},
                          {"cache", nullptr}};
    if (cache) {
      // Predicted beside what the provider reports (the first call's usage, cached reads).
      out["cache"] = toJson(*cache);
      out["cache"]["reported_cached_tokens"] =
          firstUsage ? nlohmann::json(billedTokens(*firstUsage).cachedInput) : nlohmann::json();
    }
    std::cout << out.dump() << "\n";
    reportImages(images, args.saveImages);
    noteNewThread();
    return kExitOk;
  }
  if (!args.stream) {
    const std::string text = toStdout(reply.content);
    std::cout << (rendered ? rendered->feed(text) : text);
    atLineStart = reply.content.empty() || reply.content.back() == '\n';
  }
  if (rendered) std::cout << rendered->finish();
  if (!atLineStart) std::cout << "\n";
  // Tools the provider ran itself (web search, code execution, ...): said, never run here.
  for (const ServerToolCall& call : serverToolCallsOf(reply)) {
    std::cerr << forTerminal(preview("[provider tool] " + call.name + " " + call.input, 200),
                             STDERR_FILENO)
              << "\n";
  }
  if (!loop) {
    for (const ToolCall& call : reply.toolCalls) {
      std::cout << toStdout("tool call (not executed): " + call.name + " " + call.arguments + " [" +
                            call.id + "]\n");
    }
  }
  reportImages(images, args.saveImages);
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
                  "Offer a built-in tool set: demo (calculate, get_time, get_weather)")
      ->allow_extra_args(false);
  cmd->add_option("--tools-file", args->toolFiles,
                  "Offer the tools of a TOML file ([[tool]] name, description, command, "
                  "parameters, timeout_ms; see the README)")
      ->allow_extra_args(false);
  addMcpOption(*cmd, args->mcpServers);
  addA2aOption(*cmd, args->a2aAgents);
  cmd->add_option("--system", args->system, "System prompt of a new conversation");
  addTemplateOptions(*cmd, args->templateName, args->saveTemplateName);
  cmd->add_option("--db", args->db,
                  "Conversation store: FILE, sqlite://FILE or postgresql://... (default: "
                  "$XDG_DATA_HOME/parley/parley.db, else ~/.local/share/parley/parley.db)");
  cmd->add_option("--thread", args->thread,
                  "Continue (or start) this stored thread and save the turn to it");
  cmd->add_flag("-c,--continue", args->continueLast, "Continue the thread used last");
  cmd->add_flag("--no-save", args->noSave,
                "Keep nothing (by default every turn is saved, a new thread titled after it)");
  cmd->add_option("-f,--file", args->files,
                  "Add a file's text to the prompt, fenced and labelled (repeatable; a directory "
                  "adds its text files; caps: 1 MiB a file, 8 MiB in all, 200 files)")
      ->allow_extra_args(false);
  cmd->add_option("--attach", args->attachments,
                  "Send a file with the prompt as a message part: an image, wav/mp3 audio or a "
                  "document, by its type (repeatable; - reads stdin; cap: 20 MiB a file, 50 MiB "
                  "in all)")
      ->allow_extra_args(false);
  cmd->add_option("--timeout", args->timeoutMs,
                  "Bound the whole turn (model calls, retries, tools), in ms");
  cmd->add_option("--format", args->format,
                  "The reply as text (Markdown rendered, wrapped; the default on a terminal), "
                  "markdown (as the model wrote it; the default elsewhere) or json (as --json)");
  cmd->add_option("--color", args->color,
                  "Styles in --format text: auto (on a terminal, unless NO_COLOR is set), always "
                  "or never")
      ->capture_default_str();
  addPricesOption(*cmd, args->pricesFile);
  cmd->add_option("--max-cost", args->maxCost,
                  "Refuse, before sending, any model call that could take the turn's cost over "
                  "this many USD (the exact prompt count and the max_tokens bound, priced with "
                  "--prices; an unpriced model is refused)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--save-images", args->saveImages,
                  "Write the images the model generates (Gemini image models, the Responses "
                  "image_generation tool) into DIR as image-N.png");
  cmd->add_flag("--json", args->json,
                "Print one JSON object: {\"message\", \"finish_reason\", \"usage\", "
                "\"cost_usd\" (null when the model is unpriced)}");
  cmd->add_option("--schema", args->schema,
                  "Answer with JSON valid against a schema, printed alone: a file, JSON text, or "
                  "fields like 'name, age int, bio: a short bio' (types str, int, float, bool); "
                  "exit code 3 when the answer never matched");
  cmd->add_option("prompt", args->prompt,
                  "The prompt (text piped on stdin is added after it, or is the prompt; up to "
                  "8 MiB)");
  cmd->callback([args, cmd, &exitCode] {
    args->threadGiven = cmd->get_option("--thread")->count() > 0;
    exitCode = runAsk(*args);
  });
}

}  // namespace parley::cli
