// `parley chat`: the slash commands and the request settings (chat_session.hpp).
#include "chat_session.hpp"
#include "parley/server_tools.hpp"

namespace parley::cli {
namespace {

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

}  // namespace

// /copy [FILE]: the last reply, to FILE or to the first clipboard tool found.
void ChatSession::copyLastReply(const std::string& file) {
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

bool ChatSession::onPath(const std::string& program) {
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

// "" clears the setting. Values are checked here, so a bad one never reaches a request.
// A system prompt first in the view, replacing the one there; one step of /undo.
void ChatSession::setSystemPrompt(const std::string& text) {
  ConversationManager& manager = current().manager;
  const std::optional<ContextOperation> op = systemPromptOperation(manager, text);
  if (!op) return;  // already the prompt in use
  current().undo.push_back(manager.getMarkMap().currentBatch);
  applyContextOperation(manager, *op);
  save();
}

// /template NAME: its system prompt, model, parameters and prompt pattern from now on. Its
// tools and profile need a new session (-t NAME): a session keeps its endpoint and tools.
void ChatSession::useTemplate(const PromptTemplate& t) {
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

void ChatSession::setSetting(const std::string& key, const std::string& value) {
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

// A model the endpoint does not list is refused (a typo would fail every later turn); when
// the endpoint gives no list, the name is taken as given.
void ChatSession::checkModel(const std::string& name) {
  if (!knownModels_) {
    knownModels_.emplace();
    try {
      for (const ModelInfo& model : options_.llm->listModels(std::chrono::seconds(10)))
        knownModels_->push_back(model.id);
    } catch (const Error&) {
      out_ << "note: the endpoint's models could not be listed; " << name << " is not checked\n";
    }
  }
  if (knownModels_->empty() || name == clientModel_ ||
      std::find(knownModels_->begin(), knownModels_->end(), name) != knownModels_->end()) {
    return;
  }
  throw ValidationError("/model", "\"" + name + "\" is not a model of this endpoint (it lists " +
                                      preview(joinNames(*knownModels_), 300) +
                                      "; see parley models)");
}

ChatRequest ChatSession::requestWithSettings(ChatRequest request) const {
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

void ChatSession::showSettings() {
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

// Returns false to end the session.
bool ChatSession::command(const std::string& line) {
  const size_t space = line.find(' ');
  const std::string name =
      line.substr(1, space == std::string::npos ? std::string::npos : space - 1);
  std::string argument = space == std::string::npos ? "" : line.substr(space + 1);
  while (!argument.empty() && argument.back() == ' ')
    argument.pop_back();
  if (name == "exit") return false;
  const auto& table = commands();
  auto found =
      std::find_if(table.begin(), table.end(), [&](const Command& c) { return name == c.name; });
  if (found == table.end()) throw ValidationError("/" + name, "unknown command (try /help)");
  (this->*found->run)(argument);
  return !quitting_;
}

void ChatSession::history(const std::string&) {
  const auto messages = current().manager.getMessages();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    std::string line =
        "[" + std::to_string(i) + "] " + std::string(toString(m.role)) + ": " + preview(m.content);
    for (const ToolCall& call : m.toolCalls)
      line += " <call " + call.name + " " + preview(call.arguments) + ">";
    out_ << forTerminal(line, STDOUT_FILENO) << "\n";
  }
}

void ChatSession::usage(const std::string&) {
  const TokenUsageStats stats = current().manager.getTokenUsage();
  if (stats.lastRequest) {
    out_ << "last call: " << stats.lastRequest->promptTokens << " prompt, "
         << stats.lastRequest->completionTokens << " completion, " << stats.lastRequest->totalTokens
         << " total" << usageDetails(*stats.lastRequest) << "\n";
  }
  out_ << "all calls: " << stats.cumulative.promptTokens << " prompt, "
       << stats.cumulative.completionTokens << " completion, " << stats.cumulative.totalTokens
       << " total over " << stats.requests << " calls\n"
       << "context: " << stats.context.contextTokens << (stats.context.estimated ? " (est.)" : "")
       << " of "
       << (stats.context.tokenLimit > 0 ? std::to_string(stats.context.tokenLimit)
                                        : std::string("no limit"))
       << "\n";
}

void ChatSession::cost(const std::string&) {
  out_ << "this session: " << formatUsd(sessionCost_);
  if (unpricedTurns_ > 0) {
    out_ << " (not counted: " << unpricedTurns_ << " unpriced turn"
         << (unpricedTurns_ == 1 ? "" : "s") << ")";
  }
  out_ << "\n";
}

void ChatSession::system(const std::string& argument) {
  if (argument.empty()) {
    const std::vector<Message> view = current().manager.getMessages();
    if (view.empty() || view.front().role != Role::System) {
      out_ << "no system prompt (set one: /system TEXT)\n";
    } else {
      out_ << "system prompt: " << forTerminal(view.front().content, STDOUT_FILENO) << "\n";
    }
    return;
  }
  setSystemPrompt(argument);
  out_ << "system prompt set\n";
}

void ChatSession::templateCommand(const std::string& argument) {
  if (argument.empty()) throw ValidationError("/template", "give a name: /template NAME");
  useTemplate(readTemplate(configFile(args_.endpoint), argument));
}

// The request's model: a /set or /template one, else the endpoint's.
std::string ChatSession::modelInUse() const {
  const ChatRequest request = settings_ ? requestWithSettings(current().manager.options().request)
                                        : current().manager.options().request;
  return request.model.empty() ? clientModel_ : request.model;
}

void ChatSession::model(const std::string& argument) {
  if (argument.empty()) {
    out_ << "model: " << modelInUse() << "\n";
    return;
  }
  checkModel(resolveModelAlias(configFile(args_.endpoint), argument));
  setSetting("model", argument);
  out_ << "model: " << settings_->at("model").get<std::string>() << "\n";
}

void ChatSession::set(const std::string& argument) {
  const size_t split = argument.find(' ');
  const std::string key = argument.substr(0, split);
  if (key.empty()) throw ValidationError("/set", "give a setting: /set KEY [VALUE]");
  const std::string value = split == std::string::npos ? "" : argument.substr(split + 1);
  // A model typed here is checked; a template's is taken as its author wrote it.
  if (key == "model" && !value.empty()) {
    checkModel(resolveModelAlias(configFile(args_.endpoint), value));
  }
  setSetting(key, value);
  showSettings();
}

// /show settings; /show tools opens what the last turn's provider-run tools were given and gave
// back (a turn shows each folded to one line).
void ChatSession::show(const std::string& argument) {
  if (argument == "settings") {
    showSettings();
    return;
  }
  if (argument != "tools") throw ValidationError("/show", "try /show settings or /show tools");
  const std::vector<Message> view = current().manager.getMessages();
  size_t start = view.size();
  while (start > 0 && view[start - 1].role != Role::User)
    --start;  // the last turn: what followed the last prompt
  bool any = false;
  for (size_t i = start; i < view.size(); ++i) {
    for (const ServerToolCall& call : serverToolCallsOf(view[i])) {
      any = true;
      const nlohmann::json input = parseJson(call.input, {}, /*allowExceptions=*/false);
      out_ << forTerminal(
          "[provider tool " + call.name + "] " + call.id +
              "\ninput: " + (input.is_discarded() ? call.input : input.dump(2)) + "\n" +
              (call.result.is_null() ? "" : "result: " + call.result.dump(2) + "\n"),
          STDOUT_FILENO);
    }
  }
  if (!any) out_ << "no provider-run tool in the last turn\n";
}

// /title TEXT names the thread; /title alone asks the model for a title (thread_title.hpp).
void ChatSession::title(const std::string& argument) {
  Branch& branch = current();
  if (!branch.stored) save();
  std::string title = argument;
  if (title.empty()) {
    const std::vector<Message> all = branch.manager.getAllMessages();
    title = proposeTitle(*options_.llm, settings_ ? modelInUse() : "", all);
  }
  store_->setThreadTitle(branch.thread->threadId(), title);
  out_ << "title: " << forTerminal(title, STDOUT_FILENO) << "\n";
}

void ChatSession::continueCommand(const std::string& argument) {
  turn(argument.empty() ? "Continue." : argument);
}

void ChatSession::file(const std::string& argument) {
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
}

void ChatSession::attach(const std::string& argument) {
  if (argument.empty()) throw ValidationError("/attach", "give a path: /attach FILE");
  std::vector<Part> parts = attachmentParts({argument});
  std::vector<Part> all = attachments_;
  all.push_back(parts.front());
  promptMessage("", all);  // throws past the per-message caps, before keeping it
  attachments_ = std::move(all);
  out_ << "attached " << argument << " (" << parts.front().mimeType << ", "
       << parts.front().bytes.size() << " bytes): sent with the next prompt\n";
}

}  // namespace parley::cli
