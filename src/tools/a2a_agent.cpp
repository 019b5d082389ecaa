// A remote A2A agent as a tool (parley/a2a.hpp): its card over HTTP GET, its JSON-RPC binding
// over HTTP POST (libcurl, bounded in size and time), a task followed to its end.
#include "parley/a2a.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "parley/errors.hpp"
#include "parley/json.hpp"
#include "parley/tools.hpp"

namespace parley {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

struct A2aTransfer {
  std::string body;
  std::size_t maxBytes = 0;
  bool tooLarge = false;
  std::stop_token stop;
};

size_t a2aOnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<A2aTransfer*>(user);
  if (transfer->body.size() + size * count > transfer->maxBytes) {
    transfer->tooLarge = true;
    return 0;
  }
  transfer->body.append(data, size * count);
  return size * count;
}

int a2aOnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<A2aTransfer*>(user)->stop.stop_requested() ? 1 : 0;
}

// One request; the body of a 2xx answer (an HttpError otherwise).
std::string a2aExchange(const A2aAgentOptions& options, const std::string& url,
                        const std::string* body, std::size_t maxBytes, std::stop_token stop,
                        const std::string& what) {
  CURL* easy = curl_easy_init();
  if (!easy) throw ConnectionError("libcurl could not be initialised");
  curl_slist* headers = nullptr;
  std::vector<std::string> lines = {"Accept: application/json", "A2A-Version: 1.0"};
  if (body) lines.emplace_back("Content-Type: application/json");
  if (!options.bearerToken.empty()) lines.push_back("Authorization: Bearer " + options.bearerToken);
  for (const auto& [name, value] : options.headers)
    lines.push_back(name + ": " + value);
  for (const auto& line : lines)
    headers = curl_slist_append(headers, line.c_str());
  A2aTransfer transfer;
  transfer.maxBytes = maxBytes;
  transfer.stop = std::move(stop);
  char errorBuffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);  // no redirect to anywhere else
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(options.httpTimeout.count()));
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "parley/" PARLEY_VERSION);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errorBuffer);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &a2aOnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &a2aOnProgress);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  if (body) {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode code = curl_easy_perform(easy);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  const std::string message = errorBuffer[0] ? errorBuffer : curl_easy_strerror(code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(easy);
  if (transfer.tooLarge) {
    throw ProtocolError(what + " at " + url + " is larger than " + std::to_string(maxBytes) +
                        " bytes");
  }
  if (code == CURLE_OPERATION_TIMEDOUT) {
    throw TimeoutError(what + " at " + url + ": no answer within " +
                       std::to_string(options.httpTimeout.count()) + " ms (httpTimeout)");
  }
  if (code == CURLE_ABORTED_BY_CALLBACK) throw CancelledError(what + " was cancelled");
  if (code != CURLE_OK) throw ConnectionError(what + " at " + url + ": " + message);
  if (status / 100 != 2) {
    HttpError::Details details;
    details.status = static_cast<int>(status);
    details.body = transfer.body.substr(0, 4096);
    details.apiMessage = what + " at " + url + " answered HTTP " + std::to_string(status);
    throw HttpError(details);
  }
  return std::move(transfer.body);
}

std::string a2aText(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The text of parts: text as is, data as JSON, a file as a note.
std::string a2aPartsText(const json& parts) {
  std::string text;
  if (!parts.is_array()) return text;
  for (const auto& part : parts) {
    if (!part.is_object()) continue;
    std::string piece;
    if (part.contains("text") && part["text"].is_string()) {
      piece = part["text"];
    } else if (part.contains("data")) {
      piece = part["data"].dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (part.contains("url") || part.contains("raw")) {
      piece = "[file " + a2aText(part, "filename") + " " + a2aText(part, "mediaType") + "]";
    }
    if (piece.empty()) continue;
    if (!text.empty()) text += "\n";
    text += piece;
  }
  return text;
}

class A2aCall {
 public:
  A2aCall(const A2aAgentCard& card, const A2aAgentOptions& options, std::stop_token stop)
      : card_(card), options_(options), stop_(std::move(stop)) {}

  json rpc(const std::string& method, json params) {
    const json request = {
        {"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", std::move(params)}};
    const std::string body = request.dump(-1, ' ', false, json::error_handler_t::replace);
    const std::string answer = a2aExchange(options_, card_.jsonRpcUrl, &body,
                                           options_.maxResponseBytes, stop_, "A2A " + method);
    json response = parseJson(answer, {}, false);
    if (response.is_discarded() || !response.is_object()) {
      throw ProtocolError("A2A " + method + " at " + card_.jsonRpcUrl +
                          ": the answer is not a JSON-RPC response");
    }
    if (auto error = response.find("error"); error != response.end() && error->is_object()) {
      throw ProtocolError("the agent '" + card_.name + "' refused " + method + ": " +
                          a2aText(*error, "message").substr(0, 1000) + " (code " +
                          std::to_string(error->value("code", 0)) + ")");
    }
    auto result = response.find("result");
    if (result == response.end() || !result->is_object()) {
      throw ProtocolError("A2A " + method + ": the answer has no result object");
    }
    return *result;
  }

  A2aTaskResult read(const json& task) {
    A2aTaskResult out;
    out.taskId = a2aText(task, "id");
    out.contextId = a2aText(task, "contextId");
    const json status = task.value("status", json::object());
    out.state = status.is_object() ? a2aText(status, "state") : "";
    const json message = status.is_object() ? status.value("message", json::object()) : json();
    const std::string statusText =
        message.is_object() ? a2aPartsText(message.value("parts", json::array())) : "";
    const json artifacts = task.value("artifacts", json::array());
    if (artifacts.is_array()) {
      if (artifacts.size() > options_.maxArtifacts) {
        throw ProtocolError("the agent '" + card_.name + "' answered " +
                            std::to_string(artifacts.size()) + " artifacts, over " +
                            std::to_string(options_.maxArtifacts) + " (maxArtifacts)");
      }
      for (const auto& artifact : artifacts) {
        if (!artifact.is_object()) continue;
        const std::string piece = a2aPartsText(artifact.value("parts", json::array()));
        if (piece.empty()) continue;
        if (!out.text.empty()) out.text += "\n\n";
        out.text += piece;
      }
    }
    if (out.state == "TASK_STATE_INPUT_REQUIRED") out.prompt = statusText;
    if (out.text.empty()) out.text = statusText;
    if (out.text.size() > options_.maxAnswerBytes) {
      out.text.resize(options_.maxAnswerBytes);
      out.text += "\n[cut at " + std::to_string(options_.maxAnswerBytes) + " bytes]";
    }
    return out;
  }

 private:
  const A2aAgentCard& card_;
  const A2aAgentOptions& options_;
  std::stop_token stop_;
  int64_t id_ = 0;
};

bool a2aSettled(const std::string& state) {
  return state != "TASK_STATE_SUBMITTED" && state != "TASK_STATE_WORKING" && !state.empty();
}

std::string a2aCardUrl(const std::string& url) {
  if (url.ends_with(".json")) return url;
  std::string base = url;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base + "/.well-known/agent-card.json";
}

}  // namespace

A2aAgentCard fetchA2aAgentCard(const A2aAgentOptions& options) {
  if (!options.url.starts_with("http://") && !options.url.starts_with("https://"))
    throw ValidationError("url", "an A2A agent's URL is http:// or https://");
  const std::string url = a2aCardUrl(options.url);
  const std::string body =
      a2aExchange(options, url, nullptr, options.maxCardBytes, {}, "the Agent Card");
  const json card = parseJson(body, {}, false);
  if (card.is_discarded() || !card.is_object())
    throw ProtocolError("the Agent Card at " + url + " is not a JSON object");
  A2aAgentCard out;
  out.name = a2aText(card, "name");
  out.description = a2aText(card, "description");
  for (const auto& iface : card.value("supportedInterfaces", json::array())) {
    if (!iface.is_object()) continue;
    if (a2aText(iface, "protocolBinding") == "JSONRPC" &&
        a2aText(iface, "protocolVersion").starts_with("1.")) {
      out.jsonRpcUrl = a2aText(iface, "url");
      break;
    }
  }
  if (!out.jsonRpcUrl.starts_with("http://") && !out.jsonRpcUrl.starts_with("https://")) {
    throw ProtocolError("the Agent Card at " + url +
                        " names no JSONRPC interface of A2A 1.0 (supportedInterfaces)");
  }
  for (const auto& skill : card.value("skills", json::array())) {
    if (out.skills.size() >= options.maxSkills) break;
    if (!skill.is_object()) continue;
    out.skills.push_back(
        {a2aText(skill, "id"), a2aText(skill, "name"), a2aText(skill, "description")});
  }
  return out;
}

namespace {

// Reads the task again (GetTask, backing off from 50 ms to 2 s) until it is settled.
A2aTaskResult a2aPollTask(A2aCall& call, const A2aAgentCard& card, const A2aAgentOptions& options,
                          A2aTaskResult out, const std::stop_token& stop) {
  const auto deadline = std::chrono::steady_clock::now() + options.taskTimeout;
  milliseconds pause{50};
  while (!a2aSettled(out.state)) {
    if (stop.stop_requested()) throw CancelledError("the A2A task was cancelled");
    if (std::chrono::steady_clock::now() >= deadline) {
      throw TimeoutError("the A2A task " + out.taskId + " of '" + card.name +
                         "' did not end within " + std::to_string(options.taskTimeout.count()) +
                         " ms (taskTimeout)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(2'000));
    out = call.read(call.rpc("GetTask", {{"id", out.taskId}}));
  }
  return out;
}

}  // namespace

A2aTaskResult followA2aTask(const A2aAgentCard& card, const A2aAgentOptions& options,
                            const std::string& taskId, std::stop_token stop) {
  A2aCall call(card, options, stop);
  return a2aPollTask(call, card, options, call.read(call.rpc("GetTask", {{"id", taskId}})), stop);
}

A2aTaskResult sendA2aMessage(const A2aAgentCard& card, const A2aAgentOptions& options,
                             const std::string& text, const std::string& taskId,
                             const std::string& contextId, std::stop_token stop,
                             const A2aTaskStarted& started) {
  static std::atomic<uint64_t> counter{0};
  A2aCall call(card, options, stop);
  json message = {
      {"messageId",
       "parley-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) +
           "-" + std::to_string(++counter)},
      {"role", "ROLE_USER"},
      {"parts", json::array({{{"text", text}}})}};
  if (!taskId.empty()) message["taskId"] = taskId;
  if (!contextId.empty()) message["contextId"] = contextId;
  // Answered at once with the task, not at its end: the caller notes the task while it works.
  const json result = call.rpc("SendMessage", {{"message", std::move(message)},
                                               {"configuration", {{"returnImmediately", true}}}});
  if (result.contains("message") && result["message"].is_object()) {
    A2aTaskResult out;
    out.state = "TASK_STATE_COMPLETED";  // a direct answer, no task
    out.contextId = a2aText(result["message"], "contextId");
    out.text = a2aPartsText(result["message"].value("parts", json::array()));
    return out;
  }
  if (!result.contains("task") || !result["task"].is_object())
    throw ProtocolError("A2A SendMessage: the result is neither a task nor a message");
  A2aTaskResult out = call.read(result["task"]);
  if (out.taskId.empty()) throw ProtocolError("A2A SendMessage: the task has no id");
  if (started) started(out);
  // Not settled yet (the agent answered before the task's end): read it again until it is.
  return a2aPollTask(call, card, options, std::move(out), stop);
}

A2aAgentCard addA2aAgent(ToolRegistry& registry, const std::string& name,
                         const A2aAgentOptions& options) {
  A2aAgentCard card = fetchA2aAgentCard(options);
  std::string description = "Ask the remote agent '" + card.name + "'";
  if (!card.description.empty()) description += ": " + card.description;
  for (const auto& skill : card.skills) {
    description += "\n- " + (skill.name.empty() ? skill.id : skill.name);
    if (!skill.description.empty()) description += ": " + skill.description;
  }
  if (description.size() > 4096) description.resize(4096);
  const json schema = {
      {"type", "object"},
      {"properties",
       {{"message", {{"type", "string"}, {"description", "what to ask or tell the agent"}}},
        {"task_id",
         {{"type", "string"},
          {"description",
           "the task of an earlier call that asked for input: this message "
           "answers it"}}}}},
      {"required", {"message"}}};
  ToolOptions toolOptions;
  toolOptions.timeout = options.taskTimeout + options.httpTimeout;
  registry.add(
      name, description, schema,
      [card, options, name](const json& args, ToolContext& context) -> json {
        int round = 0;  // questions answered so far in this call
        // The task's handle, kept by a durable run as soon as the task exists and again after
        // each answer: a worker that takes the run over follows the same task.
        const A2aTaskStarted note = [&](const A2aTaskResult& task) {
          if (!context.checkpoint) return;
          context.checkpoint(context, {{"agent", name},
                                       {"task", task.taskId},
                                       {"context", task.contextId},
                                       {"round", round}});
        };
        A2aTaskResult result;
        const json& resume = context.resumeFrom;
        if (resume.is_object() && resume.contains("task") && resume["task"].is_string()) {
          if (resume.value("agent", "") != name) {
            throw std::runtime_error("the call was started on the A2A agent '" +
                                     resume.value("agent", "") + "', not '" + name + "'");
          }
          round = std::clamp(resume.value("round", 0), 0, options.maxInputRounds);
          result = followA2aTask(card, options, resume["task"], context.stopToken);
        } else {
          result = sendA2aMessage(card, options, args.value("message", ""),
                                  args.value("task_id", ""), "", context.stopToken, note);
        }
        while (result.state == "TASK_STATE_INPUT_REQUIRED") {
          if (!context.ask) {
            // No one to ask here: the model reads the question and may answer it.
            return "the agent asks: " + result.prompt + "\n(call " + name +
                   " again with task_id \"" + result.taskId + "\" and the answer as message)";
          }
          if (round >= options.maxInputRounds) {
            throw ProtocolError("the agent '" + card.name + "' asked for input more than " +
                                std::to_string(options.maxInputRounds) +
                                " times in one call (maxInputRounds)");
          }
          // The question names the agent and what it asks, not its task: a call run again (after
          // the answer, or by a worker that took the run over) asks the same and gets the answer.
          const json answer = context.ask(context, {{"kind", "a2a_input"},
                                                    {"agent", name},
                                                    {"round", round},
                                                    {"message", result.prompt}});
          const std::string reply = answer.is_string() ? answer.get<std::string>() : answer.dump();
          ++round;  // answered: a takeover from here on asks the next round's question
          result = sendA2aMessage(card, options, reply, result.taskId, result.contextId,
                                  context.stopToken, note);
        }
        if (result.state != "TASK_STATE_COMPLETED") {
          throw std::runtime_error("the agent's task " + result.taskId + " ended " + result.state +
                                   ": " + result.text.substr(0, 2000));
        }
        return result.text;
      },
      toolOptions);
  return card;
}

}  // namespace parley
