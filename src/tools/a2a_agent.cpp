// A remote A2A agent as a tool (parley/a2a.hpp): its card over HTTP GET, its JSON-RPC binding
// over HTTP POST (libcurl, bounded in size and time), a task followed to its end.
#include "parley/a2a.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>
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
  // A stream: the body's pieces go here instead; false ends the transfer (`ended`).
  std::function<bool(std::string_view)> sink;
  bool ended = false;
  // A stream's whole time (taskTimeout); past it the transfer stops (`late`).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  bool late = false;
};

size_t a2aOnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<A2aTransfer*>(user);
  if (transfer->sink) {
    if (transfer->sink(std::string_view(data, size * count))) return size * count;
    transfer->ended = true;
    return 0;
  }
  if (transfer->body.size() + size * count > transfer->maxBytes) {
    transfer->tooLarge = true;
    return 0;
  }
  transfer->body.append(data, size * count);
  return size * count;
}

int a2aOnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<A2aTransfer*>(user);
  if (transfer->stop.stop_requested()) return 1;
  if (transfer->deadline && std::chrono::steady_clock::now() >= *transfer->deadline) {
    transfer->late = true;
    return 1;
  }
  return 0;
}

// One request into `transfer`: the body of a 2xx answer, or its pieces to the transfer's sink
// (an HttpError otherwise). A stream is bounded by its deadline, not by httpTimeout.
void a2aPerform(const A2aAgentOptions& options, const std::string& url, const std::string* body,
                A2aTransfer& transfer, const std::string& what) {
  CURL* easy = curl_easy_init();
  if (!easy) throw ConnectionError("libcurl could not be initialised");
  curl_slist* headers = nullptr;
  const bool stream = static_cast<bool>(transfer.sink);
  std::vector<std::string> lines = {
      stream ? "Accept: text/event-stream, application/json" : "Accept: application/json",
      "A2A-Version: 1.0"};
  if (body) lines.emplace_back("Content-Type: application/json");
  if (!options.bearerToken.empty()) lines.push_back("Authorization: Bearer " + options.bearerToken);
  for (const auto& [name, value] : options.headers)
    lines.push_back(name + ": " + value);
  for (const auto& line : lines)
    headers = curl_slist_append(headers, line.c_str());
  char errorBuffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);  // no redirect to anywhere else
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  if (stream) {
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options.httpTimeout.count()));
  } else {
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(options.httpTimeout.count()));
  }
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
    throw ProtocolError(what + " at " + url + " is larger than " +
                        std::to_string(transfer.maxBytes) + " bytes");
  }
  if (transfer.ended) return;  // the stream's reader had what it wanted
  if (transfer.late) {
    throw TimeoutError(what + " at " + url + ": the task did not end within " +
                       std::to_string(options.taskTimeout.count()) + " ms (taskTimeout)");
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
}

// One request; the body of a 2xx answer (an HttpError otherwise).
std::string a2aExchange(const A2aAgentOptions& options, const std::string& url,
                        const std::string* body, std::size_t maxBytes, std::stop_token stop,
                        const std::string& what) {
  A2aTransfer transfer;
  transfer.maxBytes = maxBytes;
  transfer.stop = std::move(stop);
  a2aPerform(options, url, body, transfer, what);
  return std::move(transfer.body);
}

// Server-sent events, fed as they come: each event's `data:` lines, joined, go to the reader.
// Bounded: an event past maxStreamEventBytes, or more than maxStreamEvents, stops the stream
// with `error` saying which.
class A2aEventStream {
 public:
  A2aEventStream(std::size_t maxEventBytes, std::size_t maxEvents)
      : maxEventBytes_(maxEventBytes), maxEvents_(maxEvents) {}

  // False: stop reading (the reader said so, or a cap was passed).
  bool feed(std::string_view bytes, const std::function<bool(const std::string&)>& read) {
    for (char c : bytes)
      if (c != '\r') buffer_ += c;  // CRLF as LF: JSON data holds no raw CR
    for (std::size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
      if (end > maxEventBytes_) break;  // refused below
      std::string data;
      std::size_t at = 0;
      while (at < end) {
        std::size_t eol = buffer_.find('\n', at);
        if (eol == std::string::npos || eol > end) eol = end;
        const std::string_view line(buffer_.data() + at, eol - at);
        if (line.starts_with("data:")) {
          std::string_view value = line.substr(5);
          if (value.starts_with(' ')) value.remove_prefix(1);
          if (!data.empty()) data += '\n';
          data += value;
        }
        at = eol + 1;
      }
      buffer_.erase(0, end + 2);
      if (data.empty()) continue;  // a comment or a keep-alive
      if (++events_ > maxEvents_) {
        error_ = "more than " + std::to_string(maxEvents_) + " events (maxStreamEvents)";
        return false;
      }
      if (!read(data)) return false;
    }
    if (buffer_.size() > maxEventBytes_ && buffer_.find("\n\n") > maxEventBytes_) {
      error_ =
          "an event larger than " + std::to_string(maxEventBytes_) + " bytes (maxStreamEventBytes)";
      return false;
    }
    return true;
  }
  const std::string& error() const { return error_; }
  std::size_t events() const { return events_; }
  const std::string& rest() const { return buffer_; }  // what no event took (a JSON answer)

 private:
  std::size_t maxEventBytes_;
  std::size_t maxEvents_;
  std::size_t events_ = 0;
  std::string buffer_;
  std::string error_;
};

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

// How a streaming request ended.
enum class A2aStreamEnd {
  Settled,  // the reader had what it wanted (the task ended or needs input)
  Ended,    // the stream ended before that
  Refused,  // the agent answered a JSON-RPC error instead of a stream
};

class A2aCall {
 public:
  A2aCall(const A2aAgentCard& card, const A2aAgentOptions& options, std::stop_token stop)
      : card_(card),
        options_(options),
        stop_(std::move(stop)),
        deadline_(std::chrono::steady_clock::now() + options.taskTimeout) {}

  std::chrono::steady_clock::time_point deadline() const { return deadline_; }

  // A streaming method (SendStreamingMessage, SubscribeToTask): each StreamResponse to `apply`
  // until it returns false. Bounded by the options' stream caps and taskTimeout.
  A2aStreamEnd stream(const std::string& method, json params,
                      const std::function<bool(const json&)>& apply) {
    const json request = {
        {"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", std::move(params)}};
    const std::string body = request.dump(-1, ' ', false, json::error_handler_t::replace);
    const std::string what = "A2A " + method;
    A2aEventStream events(options_.maxStreamEventBytes, options_.maxStreamEvents);
    std::exception_ptr failure;  // nothing is thrown through libcurl
    A2aTransfer transfer;
    transfer.stop = stop_;
    transfer.deadline = deadline_;
    transfer.sink = [&](std::string_view bytes) {
      return events.feed(bytes, [&](const std::string& data) {
        try {
          return apply(result(parseJson(data, {}, false), method));
        } catch (...) {
          failure = std::current_exception();
          return false;
        }
      });
    };
    a2aPerform(options_, card_.jsonRpcUrl, &body, transfer, what);
    if (failure) std::rethrow_exception(failure);
    if (!events.error().empty()) {
      throw ProtocolError(what + " at " + card_.jsonRpcUrl + ": " + events.error());
    }
    if (transfer.ended) return A2aStreamEnd::Settled;
    if (events.events() == 0 && events.rest().starts_with("{")) {
      // A JSON-RPC answer instead of a stream: an error (the agent does not stream this).
      const json answer = parseJson(events.rest(), {}, false);
      if (answer.is_object() && answer.contains("error")) return A2aStreamEnd::Refused;
    }
    return A2aStreamEnd::Ended;
  }

  json rpc(const std::string& method, json params) {
    const json request = {
        {"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", std::move(params)}};
    const std::string body = request.dump(-1, ' ', false, json::error_handler_t::replace);
    const std::string answer = a2aExchange(options_, card_.jsonRpcUrl, &body,
                                           options_.maxResponseBytes, stop_, "A2A " + method);
    return result(parseJson(answer, {}, false), method);
  }

  // The result object of a JSON-RPC response (a ProtocolError for an error or no result).
  json result(const json& response, const std::string& method) const {
    if (response.is_discarded() || !response.is_object()) {
      throw ProtocolError("A2A " + method + " at " + card_.jsonRpcUrl +
                          ": the answer is not a JSON-RPC response");
    }
    if (auto error = response.find("error"); error != response.end() && error->is_object()) {
      throw ProtocolError("the agent '" + card_.name + "' refused " + method + ": " +
                          a2aText(*error, "message").substr(0, 1000) + " (code " +
                          std::to_string(error->value("code", 0)) + ")");
    }
    auto found = response.find("result");
    if (found == response.end() || !found->is_object()) {
      throw ProtocolError("A2A " + method + ": the answer has no result object");
    }
    return *found;
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
  std::chrono::steady_clock::time_point deadline_;  // of the whole call (taskTimeout)
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
  // A card that must be signed is checked before anything of it is used.
  if (!options.cardPublicKey.empty()) {
    try {
      out.signedBy =
          verifyA2aCardSignature(card, options.cardPublicKey, options.cardSignatureLimits);
    } catch (const ProtocolError& e) {
      throw ProtocolError("the Agent Card at " + url + " is refused: " + e.what());
    }
  }
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
  const json capabilities = card.value("capabilities", json::object());
  out.streaming = capabilities.is_object() && capabilities.value("streaming", false) == true;
  for (const auto& skill : card.value("skills", json::array())) {
    if (out.skills.size() >= options.maxSkills) break;
    if (!skill.is_object()) continue;
    out.skills.push_back(
        {a2aText(skill, "id"), a2aText(skill, "name"), a2aText(skill, "description")});
  }
  return out;
}

namespace {

// At most this much of one streamed status or artifact chunk goes into a progress report (a line
// for people; the answer keeps it whole).
constexpr std::size_t kA2aProgressBytes = 4096;

std::string a2aProgressText(std::string text) {
  if (text.size() <= kA2aProgressBytes) return text;
  std::size_t cut = kA2aProgressBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;  // not inside a UTF-8 sequence
  text.resize(cut);
  return text + "...";
}

// A task as its stream tells it: the StreamResponses (task, statusUpdate, artifactUpdate,
// message) applied in order; each update reported as progress, the task noted once it has an id.
class A2aStreamedTask {
 public:
  A2aStreamedTask(const A2aAgentCard& card, const A2aAgentOptions& options, const A2aFollow& follow,
                  json task = json::object())
      : card_(card), options_(options), follow_(follow), task_(std::move(task)) {
    noted_ = !a2aText(task_, "id").empty();  // a task read before: noted by whoever read it
  }

  // False once the task is settled (ended or needs input) or answered with a message.
  bool apply(const json& response) {
    if (!response.is_object()) throw ProtocolError("A2A stream: an event that is not an object");
    if (auto task = response.find("task"); task != response.end() && task->is_object()) {
      task_ = *task;
    } else if (auto status = response.find("statusUpdate");
               status != response.end() && status->is_object()) {
      adopt(*status);
      task_["status"] = status->value("status", json::object());
      const json& now = task_["status"];
      const json message = now.is_object() ? now.value("message", json()) : json();
      const std::string text =
          message.is_object() ? a2aPartsText(message.value("parts", json::array())) : "";
      report(text, {{"task", a2aText(task_, "id")}, {"state", a2aText(now, "state")}});
    } else if (auto update = response.find("artifactUpdate");
               update != response.end() && update->is_object()) {
      adopt(*update);
      merge(*update);
    } else if (auto message = response.find("message");
               message != response.end() && message->is_object()) {
      message_ = *message;
      return false;
    } else {
      throw ProtocolError("A2A stream: an event of no kind A2A 1.0 names");
    }
    if (!noted_ && !a2aText(task_, "id").empty()) {
      noted_ = true;
      if (follow_.started) {
        A2aTaskResult known;
        known.taskId = a2aText(task_, "id");
        known.contextId = a2aText(task_, "contextId");
        known.state = state();
        follow_.started(known);
      }
    }
    return !a2aSettled(state());
  }

  std::string state() const {
    auto status = task_.find("status");
    return status != task_.end() && status->is_object() ? a2aText(*status, "state") : "";
  }
  const json& task() const { return task_; }
  const json& message() const { return message_; }  // an answer without a task; else null

 private:
  // An update names its task: the task of a stream that did not start with one.
  void adopt(const json& update) {
    if (a2aText(task_, "id").empty()) {
      task_["id"] = a2aText(update, "taskId");
      task_["contextId"] = a2aText(update, "contextId");
    }
  }

  // An artifact's chunk: a new artifact, one replaced, or parts appended to one.
  void merge(const json& update) {
    const json artifact = update.value("artifact", json::object());
    if (!artifact.is_object()) throw ProtocolError("A2A stream: an artifactUpdate's artifact");
    const json parts = artifact.value("parts", json::array());
    streamed_ += parts.dump(-1, ' ', false, json::error_handler_t::replace).size();
    if (streamed_ > options_.maxResponseBytes) {
      throw ProtocolError("the agent '" + card_.name + "' streamed artifacts of more than " +
                          std::to_string(options_.maxResponseBytes) + " bytes (maxResponseBytes)");
    }
    if (!task_.contains("artifacts") || !task_["artifacts"].is_array())
      task_["artifacts"] = json::array();
    json& artifacts = task_["artifacts"];
    const std::string id = a2aText(artifact, "artifactId");
    auto same = std::find_if(artifacts.begin(), artifacts.end(), [&](const json& a) {
      return a.is_object() && a2aText(a, "artifactId") == id;
    });
    if (same == artifacts.end()) {
      artifacts.push_back(artifact);
    } else if (update.value("append", false) && parts.is_array()) {
      json& kept = (*same)["parts"];
      if (!kept.is_array()) kept = json::array();
      for (const json& part : parts) {
        // Streamed text continues the text before it (one part, not a line per chunk).
        const bool text = part.is_object() && part.size() == 1 && part.contains("text") &&
                          part["text"].is_string();
        if (text && !kept.empty() && kept.back().is_object() && kept.back().size() == 1 &&
            kept.back().contains("text") && kept.back()["text"].is_string()) {
          kept.back()["text"] =
              kept.back()["text"].get<std::string>() + part["text"].get<std::string>();
        } else {
          kept.push_back(part);
        }
      }
    } else {
      *same = artifact;
    }
    report(a2aPartsText(parts), {{"task", a2aText(task_, "id")},
                                 {"artifact", id},
                                 {"append", update.value("append", false)},
                                 {"last_chunk", update.value("lastChunk", false)}});
  }

  void report(const std::string& text, const json& data) {
    if (!follow_.progress) return;
    follow_.progress(a2aProgressText(text), data);
  }

  const A2aAgentCard& card_;
  const A2aAgentOptions& options_;
  const A2aFollow& follow_;
  json task_;
  json message_;
  std::size_t streamed_ = 0;  // bytes of artifact parts streamed
  bool noted_ = false;
};

// Reads the task again (GetTask, backing off from 50 ms to 2 s) until it is settled.
A2aTaskResult a2aPollTask(A2aCall& call, const A2aAgentCard& card, const A2aAgentOptions& options,
                          A2aTaskResult out, const std::stop_token& stop) {
  milliseconds pause{50};
  while (!a2aSettled(out.state)) {
    if (stop.stop_requested()) throw CancelledError("the A2A task was cancelled");
    if (std::chrono::steady_clock::now() >= call.deadline()) {
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

// Follows a task known by `task` (a task object) to its end: over SubscribeToTask when the agent
// streams, else (and when the stream ends early or is refused) by polling.
A2aTaskResult a2aFollowTask(A2aCall& call, const A2aAgentCard& card, const A2aAgentOptions& options,
                            const json& task, const A2aFollow& follow) {
  A2aTaskResult out = call.read(task);
  if (a2aSettled(out.state)) return out;
  if (card.streaming) {
    A2aStreamedTask streamed(card, options, follow, task);
    const A2aStreamEnd end = call.stream("SubscribeToTask", {{"id", out.taskId}},
                                         [&](const json& r) { return streamed.apply(r); });
    // Refused: the task ended between the read and the subscription (or the agent does not
    // subscribe); the next read says how.
    if (end != A2aStreamEnd::Refused) out = call.read(streamed.task());
  }
  return a2aPollTask(call, card, options, std::move(out), follow.stop);
}

}  // namespace

A2aTaskResult followA2aTask(const A2aAgentCard& card, const A2aAgentOptions& options,
                            const std::string& taskId, const A2aFollow& follow) {
  A2aCall call(card, options, follow.stop);
  return a2aFollowTask(call, card, options, call.rpc("GetTask", {{"id", taskId}}), follow);
}

A2aTaskResult sendA2aMessage(const A2aAgentCard& card, const A2aAgentOptions& options,
                             const std::string& text, const std::string& taskId,
                             const std::string& contextId, const A2aFollow& follow) {
  static std::atomic<uint64_t> counter{0};
  A2aCall call(card, options, follow.stop);
  json message = {
      {"messageId",
       "parley-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) +
           "-" + std::to_string(++counter)},
      {"role", "ROLE_USER"},
      {"parts", json::array({{{"text", text}}})}};
  if (!taskId.empty()) message["taskId"] = taskId;
  if (!contextId.empty()) message["contextId"] = contextId;
  json result;
  if (card.streaming) {
    // The task's updates as they come: its progress, and its id as soon as it has one.
    A2aStreamedTask streamed(card, options, follow);
    if (call.stream("SendStreamingMessage", {{"message", std::move(message)}},
                    [&](const json& r) { return streamed.apply(r); }) == A2aStreamEnd::Refused) {
      throw ProtocolError("the agent '" + card.name + "' refused SendStreamingMessage");
    }
    if (streamed.message().is_object()) {
      result = {{"message", streamed.message()}};
    } else if (a2aText(streamed.task(), "id").empty()) {
      throw ProtocolError("A2A SendStreamingMessage: the stream ended before it named a task");
    } else {
      // Settled, or the stream ended early: followed on by reading the task.
      return a2aFollowTask(call, card, options, streamed.task(), follow);
    }
  } else {
    // Answered at once with the task, not at its end: the caller notes the task while it works.
    result = call.rpc("SendMessage", {{"message", std::move(message)},
                                      {"configuration", {{"returnImmediately", true}}}});
  }
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
  if (follow.started) follow.started(out);
  // Not settled yet (the agent answered before the task's end): read it again until it is.
  return a2aPollTask(call, card, options, std::move(out), follow.stop);
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
        A2aFollow follow;
        follow.stop = context.stopToken;
        follow.started = [&](const A2aTaskResult& task) {
          if (!context.checkpoint) return;
          context.checkpoint(context, {{"agent", name},
                                       {"task", task.taskId},
                                       {"context", task.contextId},
                                       {"round", round}});
        };

        // The task's status messages and artifact chunks as the call's progress (a durable
        // run's tool_execution_progress events).
        if (context.progress) {
          follow.progress = [&](const std::string& text, const json& data) {
            context.progress(context, text, data);
          };
        }
        A2aTaskResult result;
        const json& resume = context.resumeFrom;
        if (resume.is_object() && resume.contains("task") && resume["task"].is_string()) {
          if (resume.value("agent", "") != name) {
            throw std::runtime_error("the call was started on the A2A agent '" +
                                     resume.value("agent", "") + "', not '" + name + "'");
          }
          round = std::clamp(resume.value("round", 0), 0, options.maxInputRounds);
          result = followA2aTask(card, options, resume["task"], follow);
        } else {
          result = sendA2aMessage(card, options, args.value("message", ""),
                                  args.value("task_id", ""), "", follow);
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
          result = sendA2aMessage(card, options, reply, result.taskId, result.contextId, follow);
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
