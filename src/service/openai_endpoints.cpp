// The OpenAI-compatible routes (openai_endpoints.hpp; docs/service.md, "OpenAI-compatible
// endpoints"). A request becomes a durable run (RunStore::submit) on a thread of its own; the
// route follows that thread's event log through the service's EventFeeds and encodes the events
// of the one vocabulary (event_types.hpp) as OpenAI's objects. Why runs and not a model call in
// the service: the service holds no model configuration (its workers do, maybe on other
// machines), and a run gets the workers' server-side tools, leases, takeover and the event log
// for nothing.
#include "service/openai_endpoints.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <utility>

#include "parley/errors.hpp"
#include "parley/event_types.hpp"
#include "parley/json.hpp"
#include "service/run_follower.hpp"
#include "service/thread_titles.hpp"
#include "store/sql_store.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

// --- requests ----------------------------------------------------------------------------------

constexpr size_t kMaxClientTools = 128;

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The model a request names: a served profile or a created assistant (404 model_not_found for
// another), or any name when the service lists no profiles (its workers live elsewhere).
std::string profileFor(const json& in, const ServiceOptions& options, Assistants& assistants) {
  if (!in.contains("model") || !in["model"].is_string() || in["model"].get<std::string>().empty()) {
    throw OpenAiError(400, "invalid_request_error", "missing_model", "model is required", "model");
  }
  std::string model = in["model"].get<std::string>();
  if (model.size() > options.maxIdBytes) {
    throw OpenAiError(400, "invalid_request_error", "invalid_model",
                      "model must be at most " + std::to_string(options.maxIdBytes) + " bytes",
                      "model");
  }
  if (!options.models.empty() &&
      std::find(options.models.begin(), options.models.end(), model) == options.models.end() &&
      !assistants.created(model)) {
    throw OpenAiError(404, "invalid_request_error", "model_not_found",
                      "The model `" + model + "` does not exist (GET /v1/models lists them)",
                      "model");
  }
  return model;
}

// The run's settings for the model: a created assistant's current version, else the profile.
void applyModel(const std::string& model, const ServiceOptions& options, Assistants& assistants,
                SubmitOptions& submit) {
  const bool served =
      std::find(options.models.begin(), options.models.end(), model) != options.models.end();
  if (!served) {
    if (auto made = assistants.created(model)) {
      Assistants::applyVersion(made->current, submit, "");
      return;
    }
  }
  submit.profile = model;
}

bool flag(const json& in, const char* key, bool fallback) {
  if (!in.contains(key) || in[key].is_null()) return fallback;
  if (!in[key].is_boolean()) {
    throw OpenAiError(400, "invalid_request_error", "invalid_value",
                      std::string(key) + " must be a boolean", key);
  }
  return in[key].get<bool>();
}

// Chat Completions messages as parley's: "developer" is a system message; what a model's reply
// carries about itself (usage, model, received_at) is the server's to say, so a client's copy is
// dropped (it also tells the run's own replies from the history in the event log).
std::vector<Message> chatMessages(const json& in, size_t maxMessages) {
  if (!in.contains("messages") || !in["messages"].is_array() || in["messages"].empty()) {
    throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                      "messages must be a non-empty array", "messages");
  }
  const json& given = in["messages"];
  if (given.size() > maxMessages) {
    throw OpenAiError(400, "invalid_request_error", "too_many_messages",
                      "messages holds " + std::to_string(given.size()) + "; at most " +
                          std::to_string(maxMessages) + " are accepted",
                      "messages");
  }
  json copy = json::array();
  for (const json& m : given) {
    if (!m.is_object()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_messages",
                        "each message must be an object", "messages");
    }
    json c = m;
    if (c.value("role", "") == "developer") c["role"] = "system";
    for (const char* key : {"usage", "model", "received_at"})
      c.erase(key);
    copy.push_back(std::move(c));
  }
  try {
    return messagesFromJson(copy);
  } catch (const ValidationError& e) {
    throw OpenAiError(400, "invalid_request_error", "invalid_messages", e.what(), "messages");
  }
}

// Client tools (`tools` of Chat Completions: {"type": "function", "function": {...}}) as
// SubmitOptions::clientTools; tool_choice "auto" (the default) or "none" (no tools offered).
json chatClientTools(const json& in) {
  if (!in.contains("tools") || in["tools"].is_null()) return nullptr;
  if (in.contains("tool_choice") && !in["tool_choice"].is_null()) {
    const json& choice = in["tool_choice"];
    if (choice == "none") return nullptr;
    if (choice != "auto") {
      throw OpenAiError(400, "invalid_request_error", "unsupported_tool_choice",
                        "tool_choice may be \"auto\" or \"none\": the served profile's tool loop "
                        "decides which tool runs",
                        "tool_choice");
    }
  }
  const json& tools = in["tools"];
  if (!tools.is_array() || tools.size() > kMaxClientTools) {
    throw OpenAiError(
        400, "invalid_request_error", "invalid_tools",
        "tools must be an array of at most " + std::to_string(kMaxClientTools) + " function tools",
        "tools");
  }
  json out = json::array();
  for (const json& tool : tools) {
    const bool function = tool.is_object() && tool.value("type", "") == "function" &&
                          tool.contains("function") && tool["function"].is_object();
    if (!function) {
      throw OpenAiError(400, "invalid_request_error", "invalid_tools",
                        "each tool must be {\"type\": \"function\", \"function\": {...}}", "tools");
    }
    const json& f = tool["function"];
    json t = {{"name", f.value("name", "")}, {"description", f.value("description", "")}};
    if (f.contains("parameters")) t["parameters"] = f["parameters"];
    out.push_back(std::move(t));
  }
  return out;
}

std::string firstUserText(const std::vector<Message>& messages) {
  for (const Message& m : messages)
    if (m.role == Role::User && !m.content.empty()) return m.content;
  return "";
}

json usageJson(const TokenUsage& usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens}};
}

std::string sseData(const json& value) {
  return "data: " + value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// --- Chat Completions ----------------------------------------------------------------------

// One chat completion: the request as read, and the run's answer as it is followed.
struct ChatCompletion {
  std::string id;
  std::string model;
  int64_t created = 0;
  bool stream = false;
  bool includeUsage = false;
  bool store = false;
  std::unique_ptr<RunFollower> run;
  bool started = false;  // the first chunk (the role) was sent
  std::chrono::steady_clock::time_point deadline;

  json chunk(json delta, json finishReason = nullptr) const {
    return {{"id", id},
            {"object", "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"system_fingerprint", nullptr},
            {"choices", json::array({{{"index", 0},
                                      {"delta", std::move(delta)},
                                      {"logprobs", nullptr},
                                      {"finish_reason", std::move(finishReason)}}})}};
  }

  json toolCallsJson(bool indexed) const {
    json out = json::array();
    int index = 0;
    for (const auto& call : run->answer().clientCalls) {
      json c = {{"id", call.id},
                {"type", "function"},
                {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
      if (indexed) c["index"] = index++;
      out.push_back(std::move(c));
    }
    return out;
  }

  std::string finishReason() const {
    const RunAnswer& a = run->answer();
    if (!a.clientCalls.empty()) return "tool_calls";
    return a.finishReason == "max_iterations" || a.finishReason == "length" ? "length" : "stop";
  }

  json completion() const {
    const RunAnswer& a = run->answer();
    json message = {{"role", "assistant"},
                    {"content", a.text.empty() && !a.clientCalls.empty() ? json() : json(a.text)},
                    {"refusal", nullptr}};
    if (!a.clientCalls.empty()) message["tool_calls"] = toolCallsJson(false);
    return {{"id", id},
            {"object", "chat.completion"},
            {"created", created},
            {"model", model},
            {"system_fingerprint", nullptr},
            {"choices", json::array({{{"index", 0},
                                      {"message", message},
                                      {"logprobs", nullptr},
                                      {"finish_reason", finishReason()}}})},
            {"usage", usageJson(a.usage)}};
  }
};

// --- Responses ----------------------------------------------------------------------------

// The text of a Responses content: a string, or parts of type input_text / output_text.
std::string itemText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw OpenAiError(400, "invalid_request_error", "invalid_input",
                      "a message's content must be a string or an array of text parts", "input");
  }
  std::string text;
  for (const json& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type != "input_text" && type != "output_text" && type != "text") {
      throw OpenAiError(
          400, "invalid_request_error", "unsupported_input",
          "only text parts are accepted (input_text, output_text), not '" + type + "'", "input");
    }
    text += part.value("text", "");
  }
  return text;
}

// What `input` holds: messages, and the outputs of function calls by call id.
struct ResponseInput {
  std::vector<Message> messages;
  std::vector<std::pair<std::string, std::string>> outputs;  // call id, output
};

ResponseInput responseInput(const json& in, size_t maxItems) {
  ResponseInput out;
  if (!in.contains("input") || in["input"].is_null()) {
    throw OpenAiError(400, "invalid_request_error", "missing_input", "input is required", "input");
  }
  const json& input = in["input"];
  if (input.is_string()) {
    out.messages.push_back(Message::user(input.get<std::string>()));
    return out;
  }
  if (!input.is_array() || input.empty() || input.size() > maxItems) {
    throw OpenAiError(
        400, "invalid_request_error", "invalid_input",
        "input must be a string or an array of 1 to " + std::to_string(maxItems) + " items",
        "input");
  }
  for (const json& item : input) {
    if (!item.is_object()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_input",
                        "each input item must be an object", "input");
    }
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "function_call_output") {
      const json output = item.value("output", json());
      out.outputs.emplace_back(item.value("call_id", ""),
                               output.is_string() ? output.get<std::string>() : output.dump());
      continue;
    }
    if (type != "message") {
      throw OpenAiError(400, "invalid_request_error", "unsupported_input",
                        "input items may be messages and function_call_output, not '" + type + "'",
                        "input");
    }
    const std::string role = item.value("role", "");
    const std::string text = itemText(item.value("content", json("")));
    if (role == "user") {
      out.messages.push_back(Message::user(text));
    } else if (role == "system" || role == "developer") {
      out.messages.push_back(Message::system(text));
    } else if (role == "assistant") {
      out.messages.push_back(Message::assistant(text));
    } else {
      throw OpenAiError(400, "invalid_request_error", "invalid_input",
                        "a message's role must be user, system, developer or assistant", "input");
    }
  }
  return out;
}

// Function tools of the Responses API ({"type": "function", "name", ...}) as clientTools.
json responseClientTools(const json& in) {
  if (!in.contains("tools") || in["tools"].is_null()) return nullptr;
  const json& tools = in["tools"];
  if (!tools.is_array() || tools.size() > kMaxClientTools) {
    throw OpenAiError(
        400, "invalid_request_error", "invalid_tools",
        "tools must be an array of at most " + std::to_string(kMaxClientTools) + " function tools",
        "tools");
  }
  json out = json::array();
  for (const json& tool : tools) {
    if (!tool.is_object() || tool.value("type", "") != "function") {
      throw OpenAiError(400, "invalid_request_error", "unsupported_tool",
                        "only function tools are accepted; the served profile's tools run on the "
                        "server",
                        "tools");
    }
    json t = {{"name", tool.value("name", "")}, {"description", tool.value("description", "")}};
    if (tool.contains("parameters") && !tool["parameters"].is_null()) {
      t["parameters"] = tool["parameters"];
    }
    out.push_back(std::move(t));
  }
  return out;
}

json responseUsage(const TokenUsage& usage) {
  return {{"input_tokens", usage.promptTokens},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", usage.completionTokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage.promptTokens + usage.completionTokens}};
}

// One response: its thread (the response id), run and answer.
struct ResponseState {
  std::string id;
  std::string model;
  int64_t created = 0;
  std::string previous;
  bool store = true;
  std::unique_ptr<RunFollower> run;
  std::chrono::steady_clock::time_point deadline;
  int64_t sequence = 0;
  bool messageOpen = false;
  bool started = false;

  std::string messageId() const { return "msg_" + id.substr(5); }

  json messageItem(const std::string& text, const char* status) const {
    return {{"id", messageId()},
            {"type", "message"},
            {"status", status},
            {"role", "assistant"},
            {"content", json::array({{{"type", "output_text"},
                                      {"text", text},
                                      {"annotations", json::array()},
                                      {"logprobs", json::array()}}})}};
  }

  static json callItem(const ClientToolCall& call, const std::string& arguments) {
    return {{"id", "fc_" + call.id}, {"type", "function_call"}, {"status", "completed"},
            {"call_id", call.id},    {"name", call.name},       {"arguments", arguments}};
  }
};

json responseJson(const std::string& id, const std::string& model, int64_t created,
                  const std::string& previous, const RunAnswer& answer, const std::string& status,
                  bool store) {
  json output = json::array();
  if (!answer.text.empty()) {
    output.push_back({{"id", "msg_" + id.substr(5)},
                      {"type", "message"},
                      {"status", "completed"},
                      {"role", "assistant"},
                      {"content", json::array({{{"type", "output_text"},
                                                {"text", answer.text},
                                                {"annotations", json::array()},
                                                {"logprobs", json::array()}}})}});
  }
  for (const auto& call : answer.clientCalls)
    output.push_back(ResponseState::callItem(call, call.arguments));
  json error = nullptr;
  if (answer.error) error = {{"code", answer.error->code}, {"message", answer.error->what()}};
  return {{"id", id},
          {"object", "response"},
          {"created_at", created},
          {"status", status},
          {"error", error},
          {"incomplete_details", nullptr},
          {"instructions", nullptr},
          {"max_output_tokens", nullptr},
          {"model", model},
          {"output", output},
          {"parallel_tool_calls", true},
          {"previous_response_id", previous.empty() ? json() : json(previous)},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"store", store},
          {"temperature", nullptr},
          {"text", {{"format", {{"type", "text"}}}}},
          {"tool_choice", "auto"},
          {"tools", json::array()},
          {"top_p", nullptr},
          {"truncation", "disabled"},
          {"usage", status == "in_progress" ? json() : responseUsage(answer.usage)},
          {"metadata", json::object()}};
}

std::string responseStatus(const RunAnswer& answer, bool done) {
  if (!done) return "in_progress";
  if (answer.error) return answer.error->code == "run_cancelled" ? "cancelled" : "failed";
  return "completed";
}

std::string sseEvent(const json& value) {
  return "event: " + value.value("type", "") + "\n" + sseData(value);
}

class OpenAiRoutes {
 public:
  explicit OpenAiRoutes(ServiceState& state) : state_(state) {}

  void models(const httplib::Request&, httplib::Response& res) const {
    json data = json::array();
    for (const auto& name : state_.options.models)
      data.push_back(modelJson(name));
    // The created assistants too: a client picks one as its model.
    if (auto* store = state_.assistants->store()) {
      for (const auto& a : store->list(kMaxAssistantsListed)) {
        if (!state_.assistants->isProfile(a.current.id)) data.push_back(modelJson(a.current.id));
      }
    }
    sendJson(res, 200, {{"object", "list"}, {"data", data}});
  }

  void model(const httplib::Request& req, httplib::Response& res) const {
    const std::string name = req.matches[1];
    const auto& served = state_.options.models;
    if (std::find(served.begin(), served.end(), name) == served.end() &&
        !state_.assistants->created(name)) {
      throw OpenAiError(404, "invalid_request_error", "model_not_found",
                        "The model `" + name + "` does not exist", "model");
    }
    sendJson(res, 200, modelJson(name));
  }

  void createResponse(const httplib::Request& req, httplib::Response& res) const {
    const json in = jsonBody(req);
    auto r = std::make_shared<ResponseState>();
    r->model = profileFor(in, state_.options, *state_.assistants);
    ResponseInput input = responseInput(in, state_.runs->options().limits.maxInputMessages);
    const bool stream = flag(in, "stream", false);
    r->store = flag(in, "store", true);
    SubmitOptions submit;
    applyModel(r->model, state_.options, *state_.assistants, submit);
    submit.stream = stream;
    submit.clientTools = responseClientTools(in);
    submit.metadata = {{"source", "responses"}};
    if (in.contains("instructions") && in["instructions"].is_string()) {
      submit.systemPrompt = in["instructions"].get<std::string>();
    }
    r->id = detail::generateId("resp_");
    r->created = unixNow();
    r->deadline = std::chrono::steady_clock::now() + state_.options.openAiRunTimeout;
    checkStreamRoom();
    std::vector<Message> messages;
    if (in.contains("previous_response_id") && !in["previous_response_id"].is_null()) {
      if (!in["previous_response_id"].is_string()) {
        throw OpenAiError(400, "invalid_request_error", "invalid_previous_response_id",
                          "previous_response_id must be a string", "previous_response_id");
      }
      r->previous = in["previous_response_id"].get<std::string>();
      messages = continueFrom(r->previous, r->id, input);
    } else if (!input.outputs.empty()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_input",
                        "function_call_output needs the previous_response_id that made the call",
                        "input");
    }
    messages.insert(messages.end(), input.messages.begin(), input.messages.end());
    if (messages.empty()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_input", "input holds no message",
                        "input");
    }
    if (r->previous.empty()) createTitledThread(*state_.runs, r->id, firstUserText(messages));
    const RunInfo run = submitRun(r->id, messages, submit);
    r->run = std::make_unique<RunFollower>(*state_.runs, *state_.feeds, run);
    if (!stream) {
      followToEnd(*r->run, r->deadline);
      r->run->close(r->store, /*cancelClientWait=*/false);
      const RunAnswer& a = r->run->answer();
      if (a.error && a.error->status != 500 && a.error->code != "run_cancelled") throw *a.error;
      sendJson(res, 200,
               responseJson(r->id, r->model, r->created, r->previous, a, responseStatus(a, true),
                            r->store));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    const auto heartbeat = state_.options.heartbeat;
    res.set_chunked_content_provider(
        "text/event-stream",
        [r, heartbeat](size_t, httplib::DataSink& sink) {
          std::string out;
          auto emit = [&](json event) {
            event["sequence_number"] = r->sequence++;
            out += sseEvent(event);
          };
          const RunAnswer& a = r->run->answer();
          if (!r->started) {
            r->started = true;
            const json created =
                responseJson(r->id, r->model, r->created, r->previous, a, "in_progress", r->store);
            emit({{"type", "response.created"}, {"response", created}});
            emit({{"type", "response.in_progress"}, {"response", created}});
            return sink.write(out.data(), out.size());
          }
          RunFollower& run = *r->run;
          const auto step = run.step(
              std::min(std::chrono::steady_clock::now() + heartbeat, r->deadline), r->deadline);
          if (step.parked) return true;  // called again when there is news
          for (const auto& text : step.text) {
            if (!r->messageOpen) {
              r->messageOpen = true;
              json item = r->messageItem("", "in_progress");
              item["content"] = json::array();
              emit({{"type", "response.output_item.added"}, {"output_index", 0}, {"item", item}});
              emit({{"type", "response.content_part.added"},
                    {"item_id", r->messageId()},
                    {"output_index", 0},
                    {"content_index", 0},
                    {"part",
                     {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
            }
            emit({{"type", "response.output_text.delta"},
                  {"item_id", r->messageId()},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"delta", text},
                  {"logprobs", json::array()}});
          }
          if (!run.done()) {
            // A comment only when nothing came (proxies keep an idle stream open).
            if (out.empty() && step.events.empty()) out = ": keep-alive\n\n";
            if (out.empty()) return true;
            return sink.write(out.data(), out.size());
          }
          int index = 0;
          if (r->messageOpen) {
            const json part = {
                {"type", "output_text"}, {"text", a.text}, {"annotations", json::array()}};
            emit({{"type", "response.output_text.done"},
                  {"item_id", r->messageId()},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"text", a.text},
                  {"logprobs", json::array()}});
            emit({{"type", "response.content_part.done"},
                  {"item_id", r->messageId()},
                  {"output_index", 0},
                  {"content_index", 0},
                  {"part", part}});
            emit({{"type", "response.output_item.done"},
                  {"output_index", 0},
                  {"item", r->messageItem(a.text, "completed")}});
            index = 1;
          }
          for (const auto& call : a.clientCalls) {
            json item = ResponseState::callItem(call, "");
            item["status"] = "in_progress";
            emit({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
            emit({{"type", "response.function_call_arguments.delta"},
                  {"item_id", item["id"]},
                  {"output_index", index},
                  {"delta", call.arguments}});
            emit({{"type", "response.function_call_arguments.done"},
                  {"item_id", item["id"]},
                  {"output_index", index},
                  {"arguments", call.arguments}});
            emit({{"type", "response.output_item.done"},
                  {"output_index", index},
                  {"item", ResponseState::callItem(call, call.arguments)}});
            ++index;
          }
          const std::string status = responseStatus(a, true);
          const json final =
              responseJson(r->id, r->model, r->created, r->previous, a, status, r->store);
          emit({{"type", status == "completed" ? "response.completed" : "response.failed"},
                {"response", final}});
          if (!sink.write(out.data(), out.size())) return false;
          sink.done();
          return true;
        },
        [r](bool) {
          r->run->close(r->store, /*cancelClientWait=*/false);
          r->run.reset();
        });
  }

  void getResponse(const httplib::Request& req, httplib::Response& res) const {
    const RunInfo run = responseRun(req.matches[1]);
    AnswerBuilder answer = replayRun(*state_.runs, run);
    const RunAnswer& a = answer.answer();
    const bool done = answer.done() || isFinished(run.status);
    const int64_t created =
        std::chrono::duration_cast<std::chrono::seconds>(run.createdAt.time_since_epoch()).count();
    const auto info = state_.runs->threads().threadInfo(run.threadId);
    const std::string previous =
        info && info->parentId.starts_with("resp_") ? info->parentId : std::string();
    sendJson(res, 200,
             responseJson(run.threadId, run.options.profile, created, previous, a,
                          responseStatus(a, done), true));
  }

  void deleteResponse(const httplib::Request& req, httplib::Response& res) const {
    const RunInfo run = responseRun(req.matches[1]);
    if (!isFinished(run.status)) state_.runs->cancel(run.id);
    state_.runs->threads().deleteThread(run.threadId);
    sendJson(res, 200, {{"id", run.threadId}, {"object", "response"}, {"deleted", true}});
  }

  void cancelResponse(const httplib::Request& req, httplib::Response& res) const {
    RunInfo run = responseRun(req.matches[1]);
    run = state_.runs->cancel(run.id);
    AnswerBuilder answer = replayRun(*state_.runs, run);
    const int64_t created =
        std::chrono::duration_cast<std::chrono::seconds>(run.createdAt.time_since_epoch()).count();
    sendJson(
        res, 200,
        responseJson(run.threadId, run.options.profile, created, "", answer.answer(),
                     isFinished(run.status) ? responseStatus(answer.answer(), true) : "in_progress",
                     true));
  }

  void chatCompletions(const httplib::Request& req, httplib::Response& res) const {
    const json in = jsonBody(req);
    auto chat = std::make_shared<ChatCompletion>();
    chat->model = profileFor(in, state_.options, *state_.assistants);
    std::vector<Message> messages =
        chatMessages(in, state_.runs->options().limits.maxInputMessages);
    if (in.contains("n") && !in["n"].is_null() && in["n"] != 1) {
      throw OpenAiError(400, "invalid_request_error", "unsupported_n",
                        "n must be 1: a run gives one answer", "n");
    }
    chat->stream = flag(in, "stream", false);
    chat->store = flag(in, "store", false);
    if (in.contains("stream_options") && in["stream_options"].is_object()) {
      chat->includeUsage = flag(in["stream_options"], "include_usage", false);
    }
    SubmitOptions submit;
    applyModel(chat->model, state_.options, *state_.assistants, submit);
    submit.stream = chat->stream;
    submit.clientTools = chatClientTools(in);
    submit.metadata = {{"source", "chat.completions"}};
    chat->id = detail::generateId("chatcmpl-");
    chat->created = unixNow();
    chat->deadline = std::chrono::steady_clock::now() + state_.options.openAiRunTimeout;
    checkStreamRoom();
    // A thread of its own: the request carries the whole history. Kept, it is titled from the
    // conversation's first prompt.
    if (chat->store) createTitledThread(*state_.runs, chat->id, firstUserText(messages));
    const RunInfo run = submitRun(chat->id, messages, submit);
    chat->run = std::make_unique<RunFollower>(*state_.runs, *state_.feeds, run);
    res.set_header("X-Parley-Thread", run.threadId);
    res.set_header("X-Parley-Run", run.id);
    if (!chat->stream) {
      followToEnd(*chat->run, chat->deadline);
      chat->run->close(chat->store);
      if (auto error = chat->run->answer().error) throw *error;
      sendJson(res, 200, chat->completion());
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    const auto heartbeat = state_.options.heartbeat;
    res.set_chunked_content_provider(
        "text/event-stream",
        [chat, heartbeat](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!chat->started) {
            chat->started = true;
            out = sseData(chat->chunk({{"role", "assistant"}, {"content", ""}}));
            return sink.write(out.data(), out.size());
          }
          RunFollower& run = *chat->run;
          const auto step =
              run.step(std::min(std::chrono::steady_clock::now() + heartbeat, chat->deadline),
                       chat->deadline);
          if (step.parked) return true;  // called again when there is news
          for (const auto& text : step.text)
            out += sseData(chat->chunk({{"content", text}}));
          if (!run.done()) {
            // A comment only when nothing came (proxies keep an idle stream open).
            if (out.empty() && step.events.empty()) out = ": keep-alive\n\n";
            if (out.empty()) return true;
            return sink.write(out.data(), out.size());
          }
          const RunAnswer& a = run.answer();
          if (a.error) {
            out += sseData(a.error->body());
          } else {
            if (!a.clientCalls.empty()) {
              out += sseData(chat->chunk({{"tool_calls", chat->toolCallsJson(true)}}));
            }
            out += sseData(chat->chunk(json::object(), chat->finishReason()));
            if (chat->includeUsage) {
              json last = chat->chunk(json::object());
              last["choices"] = json::array();
              last["usage"] = usageJson(a.usage);
              out += sseData(last);
            }
            out += "data: [DONE]\n\n";
          }
          if (!sink.write(out.data(), out.size())) return false;
          sink.done();
          return true;
        },
        [chat](bool) {
          // Done, or the client went away: a run not finished is cancelled unless kept.
          chat->run->close(chat->store);
          chat->run.reset();
        });
  }

 private:
  static json modelJson(const std::string& name) {
    return {{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "parley"}};
  }

  // The run of the response `id` (its thread's one run); 404 for another id.
  RunInfo responseRun(const std::string& id) const {
    const bool wellFormed = id.starts_with("resp_") && id.size() <= state_.options.maxIdBytes &&
                            std::all_of(id.begin(), id.end(), [](char ch) {
                              return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                            });
    RunListOptions list;
    list.threadId = id;
    list.limit = 1;
    std::vector<RunInfo> found;
    if (wellFormed && state_.runs->threads().threadInfo(id)) found = state_.runs->listRuns(list);
    if (found.empty()) {
      throw OpenAiError(404, "invalid_request_error", "response_not_found",
                        "Response with id '" + id + "' not found.", "response_id");
    }
    return found.front();
  }

  // The messages a response continuing `previous` starts with, on its fork `id` of the earlier
  // response's thread: the reply whose calls the client answered (journaled, not yet stored)
  // and their outputs, when the earlier run waits for them.
  std::vector<Message> continueFrom(const std::string& previous, const std::string& id,
                                    const ResponseInput& input) const {
    RunInfo before;
    try {
      before = responseRun(previous);
    } catch (const OpenAiError&) {
      throw OpenAiError(404, "invalid_request_error", "previous_response_not_found",
                        "Previous response with id '" + previous + "' not found.",
                        "previous_response_id");
    }
    const bool waitsForClient = before.status == RunStatus::Waiting && before.wait.is_object() &&
                                before.wait.value("kind", "") == "client_tools";
    if (!isFinished(before.status) && !waitsForClient) {
      throw OpenAiError(400, "invalid_request_error", "previous_response_in_progress",
                        "Previous response '" + previous + "' is still in progress",
                        "previous_response_id");
    }
    std::vector<Message> messages;
    if (waitsForClient) {
      const RunJournal journal = state_.runs->journal(before.id);
      if (journal.pendingReply) {
        // History now, not this run's reply: without what marks a reply of the run.
        Message reply = *journal.pendingReply;
        reply.usage.reset();
        reply.model.clear();
        reply.receivedAt.reset();
        messages.push_back(std::move(reply));
        for (const ToolCall& call : journal.pendingReply->toolCalls) {
          std::optional<std::string> output;
          for (const auto& [callId, text] : input.outputs)
            if (callId == call.id) output = text;
          for (const auto& entry : journal.calls)
            if (!output && entry.callId == call.id && entry.phase == ToolCallPhase::Completed)
              output = entry.text;
          if (!output) {
            throw OpenAiError(400, "invalid_request_error", "missing_tool_output",
                              "No tool output found for function call " + call.id + ".", "input");
          }
          messages.push_back(Message::tool(call.id, *output));
        }
      }
    } else if (!input.outputs.empty()) {
      throw OpenAiError(400, "invalid_request_error", "invalid_input",
                        "previous response '" + previous + "' waits for no function call output",
                        "input");
    }
    const auto parent = state_.runs->threads().threadInfo(before.threadId);
    ThreadOptions fork;
    fork.id = id;
    if (parent) fork.title = parent->title;
    state_.runs->threads().forkThread(before.threadId, parent ? parent->messageCount : 0, fork);
    return messages;
  }

  void checkStreamRoom() const {
    if (state_.feeds->streams() >= state_.options.maxStreams) {
      throw OpenAiError(503, "server_error", "too_many_streams",
                        "the service follows " + std::to_string(state_.options.maxStreams) +
                            " runs at most (ServiceOptions::maxStreams); try again later",
                        "");
    }
  }

  RunInfo submitRun(const std::string& threadId, const std::vector<Message>& input,
                    const SubmitOptions& options) const {
    try {
      return state_.runs->submit(threadId, input, options);
    } catch (const ValidationError& e) {
      throw OpenAiError(400, "invalid_request_error", "invalid_request", e.what(), "");
    }
  }

  ServiceState& state_;
};

}  // namespace

bool isOpenAiLongLived(std::string_view method, std::string_view path) {
  return method == "POST" && (path == "/v1/chat/completions" || path == "/v1/responses");
}

void installOpenAiRoutes(httplib::Server& server, ServiceState& state) {
  auto routes = std::make_shared<OpenAiRoutes>(state);
  const auto log = state.options.log;
  server.Get("/v1/models", openAiRoute(log, [routes](auto& q, auto& r) { routes->models(q, r); }));
  server.Get("/v1/models/([^/]+)",
             openAiRoute(log, [routes](auto& q, auto& r) { routes->model(q, r); }));
  server.Post("/v1/responses",
              openAiRoute(log, [routes](auto& q, auto& r) { routes->createResponse(q, r); }));
  server.Get("/v1/responses/([^/]+)",
             openAiRoute(log, [routes](auto& q, auto& r) { routes->getResponse(q, r); }));
  server.Delete("/v1/responses/([^/]+)",
                openAiRoute(log, [routes](auto& q, auto& r) { routes->deleteResponse(q, r); }));
  server.Post("/v1/responses/([^/]+)/cancel",
              openAiRoute(log, [routes](auto& q, auto& r) { routes->cancelResponse(q, r); }));
  server.Post("/v1/chat/completions",
              openAiRoute(log, [routes](auto& q, auto& r) { routes->chatCompletions(q, r); }));
}

}  // namespace parley::service
