#include "mock/mock_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "http/server.hpp"
#include "mock/chat_reply.hpp"
#include "mock/embeddings.hpp"
#include "mock/gemini_replies.hpp"
#include "mock/protocol_replies.hpp"
#include "mock/script.hpp"
#include "parley/errors.hpp"
#include "parley/json.hpp"

namespace parley::mock {
namespace {

using nlohmann::json;

constexpr std::size_t kFlushBytes = std::size_t{64} << 10;
constexpr std::string_view kKeepAlive = ": keep-alive\n\n";

std::string errorBody(const std::string& message, const std::string& type) {
  return json{
      {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}
      .dump();
}

}  // namespace

struct MockServer::Impl {
  MockOptions options;
  std::unique_ptr<http::Server> server;  // made by install()
  int port = 0;
  bool started = false;

  // Script state: the rules, how often each has answered, and the chat request counter.
  mutable std::mutex mutex;
  mutable std::condition_variable recordedCv;
  // Shared so that a request in progress keeps its rules alive across setScript(), and large
  // rules (a pre-rendered raw stream) are never copied per request.
  std::shared_ptr<const Script> script = std::make_shared<const Script>();
  std::vector<int> ruleUses;
  int chatRequests = 0;
  std::deque<json> recorded;
  PromptCache promptCache;        // the requests last answered, per conversation key
  GeminiCacheStore geminiCaches;  // cachedContents, under `mutex`
  std::size_t cleared = 0;        // requests dropped by clearRequests(); indexes stay absolute

  // Stopping: delays wait on this so stop() can cut them short.
  std::mutex stopMutex;
  std::condition_variable stopCv;
  bool stopping = false;

  // Waits `ms`; false when the server is stopping.
  bool pause(int ms) {
    std::unique_lock lock(stopMutex);
    return !stopCv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return stopping; });
  }
  bool isStopping() {
    std::lock_guard lock(stopMutex);
    return stopping;
  }

  std::size_t record(const httplib::Request& req) {
    json headers = json::object();
    for (const auto& [name, value] : req.headers) {
      std::string key = name;
      for (auto& ch : key) {
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      if (key == "remote_addr" || key == "remote_port") continue;  // added by httplib
      if (headers.contains(key)) {
        headers[key] = headers[key].get<std::string>() + ", " + value;
      } else {
        headers[key] = value;
      }
    }
    json body = parseJson(req.body, {}, /*allowExceptions=*/false);
    if (body.is_discarded()) body = req.body;
    std::lock_guard lock(mutex);
    std::size_t index = cleared + recorded.size();
    recordedCv.notify_all();
    recorded.push_back({{"index", index},
                        {"method", req.method},
                        {"path", req.path},
                        {"headers", std::move(headers)},
                        {"body", std::move(body)},
                        {"rule", nullptr},
                        {"rule_name", nullptr}});
    if (!req.params.empty()) {  // Gemini's ?alt=sse and ?key=
      json query = json::object();
      for (const auto& [name, value] : req.params)
        query[name] = value;
      recorded.back()["query"] = std::move(query);
    }
    // Bounded: a long-running mock (the demo agent behind `parley serve`) must not keep every
    // conversation it was sent.
    while (recorded.size() > options.maxRecorded) {
      recorded.pop_front();
      ++cleared;
    }
    return index;
  }

  // Passes the recorded request to options.onRequest, if set (outside the lock).
  void notify(std::size_t index) {
    if (!options.onRequest) return;
    json entry;
    {
      std::lock_guard lock(mutex);
      if (index < cleared || index - cleared >= recorded.size()) return;
      entry = recorded[index - cleared];
    }
    options.onRequest(entry);
  }

  // The usage of a reply: the estimated prompt_tokens scaled (promptTokensScale), and the
  // prompt cache's figure as cached_tokens, where the script's `given` usage says neither.
  void adjustUsage(json& usage, const json& given, std::int64_t cachedTokens) const {
    const bool givenPrompt = given.is_object() && given.contains("prompt_tokens");
    if (!givenPrompt && options.promptTokensScale != 1.0) {
      usage["prompt_tokens"] = scaledPromptTokens(usage["prompt_tokens"].get<std::int64_t>());
      usage["total_tokens"] = usage["prompt_tokens"].get<std::int64_t>() +
                              usage["completion_tokens"].get<std::int64_t>();
    }
    const bool givenCached = given.is_object() && given.contains("prompt_tokens_details") &&
                             given["prompt_tokens_details"].is_object() &&
                             given["prompt_tokens_details"].contains("cached_tokens");
    if (givenCached || cachedTokens <= 0) return;
    json& details = usage["prompt_tokens_details"];
    if (!details.is_object()) details = json::object();
    details["cached_tokens"] = std::min(cachedTokens, usage["prompt_tokens"].get<std::int64_t>());
  }

  // The mock's prompt_tokens for an estimate of `estimate` tokens: scaled by promptTokensScale,
  // at least 1. The one rule behind both the usage of a reply and the counting routes.
  std::int64_t scaledPromptTokens(std::int64_t estimate) const {
    if (options.promptTokensScale == 1.0) return std::max<std::int64_t>(1, estimate);
    return std::max<std::int64_t>(
        1, static_cast<std::int64_t>(
               std::llround(static_cast<double>(estimate) * options.promptTokensScale)));
  }
  std::chrono::system_clock::time_point now() const {
    return options.now ? options.now() : std::chrono::system_clock::now();
  }
  // Answers a cachedContents route: `act` runs under the lock; a GeminiCacheError is Google's
  // error body.
  void handleGeminiCache(const httplib::Request& req, httplib::Response& res,
                         const std::function<json()>& act) {
    notify(record(req));
    try {
      json answer;
      {
        std::lock_guard lock(mutex);
        answer = act();
      }
      sendBody(res, 200, answer.dump(), "application/json", -1);
    } catch (const GeminiCacheError& e) {
      sendBody(res, e.status, geminiErrorBody(e.status, e.what()), "application/json", -1);
    } catch (const ValidationError& e) {
      sendBody(res, 400, geminiErrorBody(400, e.what()), "application/json", -1);
    }
  }
  std::int64_t promptTokensOf(const ChatContext& ctx) const {
    return scaledPromptTokens(std::max<std::int64_t>(1, mockTokens(ctx.promptBytes)));
  }

  void install();
  // A counting route (count_tokens, apply_template, tokenize): the first script rule for
  // `endpoint` that still answers (its delay, then its error or raw body), else `answer(body)`
  // as JSON; a body that is not JSON or that `answer` refuses (ValidationError) is a 400.
  void handleCount(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
                   const std::function<json(const json&)>& answer);
  void handleChat(const httplib::Request& req, httplib::Response& res, WireProtocol protocol);
  void sendStream(httplib::Response& res, const Rule& rule, ConcreteReply reply, bool includeUsage,
                  WireProtocol protocol);
  void sendRaw(httplib::Response& res, std::shared_ptr<const Script> held, const Rule& rule);
  void sendBody(httplib::Response& res, int status, std::string body, const std::string& type,
                long cutAfter);
};

namespace {

// Writes SSE bytes to a sink: coalesces small events into large writes, applies
// disconnect_after_bytes, and flushes before every pause so delays are seen by the client.
class SinkWriter {
 public:
  SinkWriter(httplib::DataSink& sink, long cutAfter) : sink_(sink), cutAfter_(cutAfter) {}

  // False when the connection is to be dropped (cut point reached or the peer went away).
  bool write(std::string_view bytes) {
    if (cutAfter_ >= 0 &&
        written_ + buffer_.size() + bytes.size() >= static_cast<std::size_t>(cutAfter_)) {
      std::size_t room = static_cast<std::size_t>(cutAfter_) - written_ - buffer_.size();
      buffer_.append(bytes.substr(0, room));
      flush();
      return false;
    }
    if (bytes.size() >= kFlushBytes) {  // large: no copy through the buffer
      if (!flush()) return false;
      written_ += bytes.size();
      return sink_.write(bytes.data(), bytes.size());
    }
    buffer_.append(bytes);
    return buffer_.size() < kFlushBytes || flush();
  }
  bool flush() {
    if (buffer_.empty()) return true;
    bool ok = sink_.write(buffer_.data(), buffer_.size());
    written_ += buffer_.size();
    buffer_.clear();
    return ok;
  }

 private:
  httplib::DataSink& sink_;
  long cutAfter_;
  std::size_t written_ = 0;
  std::string buffer_;
};

// The mock's chat template (POST /apply-template): each message as "<|mock:ROLE|>", its text and
// each tool call as "<|mock:call NAME|>" + arguments, then "<|mock:end|>"; "<|mock:assistant|>"
// last (the generation prompt). The markers are the template's special tokens: the mock's
// tokenizer counts only the text between them, so a rendered request has the token count its
// chat request reports (the same bytes describeRequest() counts).
constexpr std::string_view kMarkerOpen = "<|mock:";
constexpr std::string_view kMarkerClose = "|>";

std::string renderTemplate(const json& body) {
  std::string prompt;
  for (const json& m : body["messages"]) {
    prompt.append(kMarkerOpen).append(m["role"].get<std::string>()).append(kMarkerClose);
    if (m.contains("content")) prompt += messageText(m["content"]);
    if (m.value("role", "") == "assistant" && m.contains("tool_calls") &&
        m["tool_calls"].is_array()) {
      for (const json& call : m["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
          continue;
        }
        prompt.append(kMarkerOpen)
            .append("call ")
            .append(call["function"].value("name", ""))
            .append(kMarkerClose);
        prompt += call["function"].value("arguments", "");
      }
    }
    prompt.append(kMarkerOpen).append("end").append(kMarkerClose);
  }
  prompt.append(kMarkerOpen).append("assistant").append(kMarkerClose);
  return prompt;
}

// The bytes of `prompt` outside the template's markers.
std::size_t textBytes(std::string_view prompt) {
  std::size_t bytes = 0;
  while (!prompt.empty()) {
    const std::size_t open = prompt.find(kMarkerOpen);
    if (open == std::string_view::npos) return bytes + prompt.size();
    bytes += open;
    const std::size_t close = prompt.find(kMarkerClose, open + kMarkerOpen.size());
    if (close == std::string_view::npos) return bytes + prompt.size() - open;
    prompt.remove_prefix(close + kMarkerClose.size());
  }
  return bytes;
}

}  // namespace

void MockServer::Impl::handleCount(const httplib::Request& req, httplib::Response& res,
                                   const std::string& endpoint,
                                   const std::function<json(const json&)>& answer) {
  const std::size_t index = record(req);
  struct NotifyOnReturn {
    Impl& impl;
    std::size_t index;
    ~NotifyOnReturn() { impl.notify(index); }
  } notifyOnReturn{*this, index};
  std::shared_ptr<const Script> held;
  const Rule* chosen = nullptr;
  {
    std::lock_guard lock(mutex);
    held = script;
    for (std::size_t i = 0; i < held->size(); ++i) {
      const Rule& rule = (*held)[i];
      if (rule.match.endpoint != endpoint) continue;
      if (rule.times && ruleUses[i] >= *rule.times) continue;
      ++ruleUses[i];
      chosen = &rule;
      if (index >= cleared && index - cleared < recorded.size()) {
        recorded[index - cleared]["rule"] = i;
        recorded[index - cleared]["rule_name"] = rule.name;
      }
      break;
    }
  }
  if (chosen) {
    if (chosen->delayMs > 0 && !pause(chosen->delayMs)) {
      sendBody(res, 503, errorBody("parley mock is stopping", "server_error"), "application/json",
               -1);
      return;
    }
    if (chosen->error) {
      for (const auto& [name, value] : chosen->error->headers)
        res.set_header(name, value);
      sendBody(res, chosen->error->status, chosen->error->body, "application/json",
               chosen->disconnectAfterBytes);
      return;
    }
    sendRaw(res, held, *chosen);
    return;
  }
  const json body = parseJson(req.body, {}, /*allowExceptions=*/false);
  try {
    if (body.is_discarded()) throw ValidationError("body", "not valid JSON");
    res.set_content(answer(body).dump(), "application/json");
  } catch (const ValidationError& e) {
    sendBody(res, 400, errorBody(e.what(), "invalid_request_error"), "application/json", -1);
  }
}

void MockServer::Impl::sendBody(httplib::Response& res, int status, std::string body,
                                const std::string& type, long cutAfter) {
  res.status = status;
  if (cutAfter < 0 || static_cast<std::size_t>(cutAfter) >= body.size()) {
    res.set_content(body, type.c_str());
    return;
  }
  // Announce the full length, send part of it, then drop the connection.
  auto shared = std::make_shared<std::string>(std::move(body));
  res.set_content_provider(shared->size(), type.c_str(),
                           [shared, cutAfter](std::size_t, std::size_t, httplib::DataSink& sink) {
                             std::size_t n =
                                 std::min(shared->size(), static_cast<std::size_t>(cutAfter));
                             if (n > 0) sink.write(shared->data(), n);
                             return false;
                           });
}

void MockServer::Impl::sendStream(httplib::Response& res, const Rule& rule, ConcreteReply reply,
                                  bool includeUsage, WireProtocol protocol) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  const StreamSpec spec = rule.stream;
  long cutAfter = rule.disconnectAfterBytes;
  res.set_chunked_content_provider(
      "text/event-stream", [this, spec, cutAfter, includeUsage, protocol, reply = std::move(reply)](
                               std::size_t, httplib::DataSink& sink) {
        SinkWriter out(sink, cutAfter);
        // Writes what is buffered, then waits; false when the peer left or the server stops.
        auto wait = [&](int ms) { return ms <= 0 || (out.flush() && pause(ms)); };
        // The server "thinking": keep-alive comments, each followed by the chunk delay.
        for (int i = 0; i < spec.keepaliveBefore; ++i) {
          if (!out.write(kKeepAlive) || !wait(spec.chunkDelayMs)) return false;
        }
        if (!wait(spec.firstDelayMs)) return false;
        int sent = 0;        // events sent so far
        bool ended = false;  // an in-stream error ended the stream
        bool alive = true;
        // Runs before each event (and once at the end): the faults positioned by event count,
        // then the gap since the previous event, with a keep-alive comment half-way through.
        auto beforeEvent = [&]() -> bool {
          if (spec.disconnectAfter >= 0 && sent == spec.disconnectAfter) {
            out.flush();
            alive = false;
            return false;
          }
          if (spec.errorAfter >= 0 && sent == spec.errorAfter) {
            alive = out.write(streamErrorEvent(protocol, spec.errorObject));
            ended = true;
            return false;
          }
          if (sent > 0) {
            int half = spec.chunkDelayMs / 2;
            alive = wait(half) && (!spec.keepaliveBetween || out.write(kKeepAlive)) &&
                    wait(spec.chunkDelayMs - half);
            if (!alive) return false;
          }
          return true;
        };
        auto emit = [&](std::string_view event) {
          if (!beforeEvent()) return false;
          ++sent;
          if (spec.malformedAt == sent) {
            alive = out.write("data: " + spec.malformedData + "\n\n");
          } else {
            alive = out.write(event);
          }
          return alive;
        };
        switch (protocol) {
          case WireProtocol::Chat:
            forEachStreamEvent(reply, includeUsage, spec.omitFinish, emit);
            break;
          case WireProtocol::Anthropic:
            forEachAnthropicEvent(reply, spec.omitFinish, emit);
            break;
          case WireProtocol::Responses:
            forEachResponsesEvent(reply, spec.omitFinish, emit);
            break;
          case WireProtocol::Gemini:
            forEachGeminiEvent(reply, spec.omitFinish, emit);
            break;
        }
        // Every event went out: the faults placed after the last one, then [DONE] (Chat
        // Completions only: the other protocols end with their own last event).
        if (alive && !ended && beforeEvent() && !spec.omitDone && protocol == WireProtocol::Chat) {
          alive = out.write("data: [DONE]\n\n");
        }
        if (!alive || !out.flush()) return false;
        sink.done();
        return true;
      });
}

void MockServer::Impl::sendRaw(httplib::Response& res, std::shared_ptr<const Script> held,
                               const Rule& rule) {
  res.status = rule.rawStatus;
  res.set_header("Cache-Control", "no-cache");
  const StreamSpec spec = rule.stream;
  long cutAfter = rule.disconnectAfterBytes;
  // `held` keeps the rule, and so its pieces, alive while the body is written.
  res.set_chunked_content_provider(
      rule.rawContentType.c_str(), [this, held = std::move(held), &pieces = rule.raw, spec,
                                    cutAfter](std::size_t, httplib::DataSink& sink) {
        SinkWriter out(sink, cutAfter);
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          if (spec.disconnectAfter >= 0 && static_cast<int>(i) == spec.disconnectAfter) {
            out.flush();
            return false;
          }
          if (i > 0 && spec.chunkDelayMs > 0) {
            if (!out.flush() || !pause(spec.chunkDelayMs)) return false;
          }
          if (!out.write(pieces[i])) return false;
          // Each piece is its own write so clients see the split points.
          if (!out.flush()) return false;
        }
        sink.done();
        return true;
      });
}

void MockServer::Impl::handleChat(const httplib::Request& req, httplib::Response& res,
                                  WireProtocol protocol) {
  std::size_t index = record(req);
  // Reports the request once its rule is known, whichever way this handler returns.
  struct NotifyOnReturn {
    Impl& impl;
    std::size_t index;
    ~NotifyOnReturn() { impl.notify(index); }
  } notifyOnReturn{*this, index};
  res.set_header("x-request-id", "req_mock_" + std::to_string(index + 1));
  // An error in the shape of the request's protocol (Google's for Gemini).
  auto errorFor = [protocol](int status, const std::string& message, const std::string& type) {
    return protocol == WireProtocol::Gemini ? geminiErrorBody(status, message)
                                            : errorBody(message, type);
  };
  json body = parseJson(req.body, {}, /*allowExceptions=*/false);
  if (body.is_discarded()) {
    sendBody(res, 400, errorFor(400, "the request body is not valid JSON", "invalid_request_error"),
             "application/json", -1);
    return;
  }
  // Choose the rule under the lock (counters are shared), then answer without it.
  std::shared_ptr<const Script> held;
  const Rule* chosen = nullptr;
  ChatContext ctx;
  std::vector<std::string> groups;
  std::int64_t cachedTokens = 0;
  std::int64_t explicitCacheTokens = 0;  // a Gemini request naming a cachedContent
  {
    std::lock_guard lock(mutex);
    int number = ++chatRequests;
    json chatBody;
    if (protocol == WireProtocol::Gemini) {
      try {
        body = geminiCaches.expand(body, req.matches[1], now(), explicitCacheTokens);
      } catch (const GeminiCacheError& e) {
        sendBody(res, e.status, geminiErrorBody(e.status, e.what()), "application/json", -1);
        return;
      }
    }
    try {
      switch (protocol) {
        case WireProtocol::Chat:
          ctx = describeRequest(body, number);
          break;
        case WireProtocol::Anthropic:
          chatBody = chatRequestFromAnthropic(body);
          ctx = describeRequest(chatBody, number);
          break;
        case WireProtocol::Responses:
          chatBody = chatRequestFromResponses(body);
          ctx = describeRequest(chatBody, number);
          break;
        case WireProtocol::Gemini:
          chatBody = chatRequestFromGemini(body, req.matches[1],
                                           req.matches[2] == "streamGenerateContent");
          ctx = describeRequest(chatBody, number);
          break;
      }
    } catch (const ValidationError& e) {
      sendBody(res, 400, errorFor(400, e.what(), "invalid_request_error"), "application/json", -1);
      return;
    }
    held = script;
    for (std::size_t i = 0; i < held->size(); ++i) {
      const Rule& rule = (*held)[i];
      if (rule.times && ruleUses[i] >= *rule.times) continue;
      if (!matches(rule.match, ctx, groups)) continue;
      ++ruleUses[i];
      chosen = &rule;
      // Only a request the "provider" processed is cached.
      if (rule.reply) {
        cachedTokens =
            promptCache.exchange(promptCacheKey(body), chatBody.is_null() ? body : chatBody, ctx);
        if (explicitCacheTokens > 0) cachedTokens = explicitCacheTokens;
      }
      if (index >= cleared && index - cleared < recorded.size()) {
        recorded[index - cleared]["rule"] = i;
        recorded[index - cleared]["rule_name"] = rule.name;
      }
      break;
    }
  }
  if (!chosen) {
    sendBody(res, 400,
             errorFor(400,
                      "parley mock: no script rule matches chat request " +
                          std::to_string(ctx.requestNumber),
                      "invalid_request_error"),
             "application/json", -1);
    return;
  }
  const Rule& rule = *chosen;
  if (rule.delayMs > 0 && !pause(rule.delayMs)) {
    sendBody(res, 503, errorFor(503, "parley mock is stopping", "server_error"), "application/json",
             -1);
    return;
  }
  if (rule.error) {
    for (const auto& [name, value] : rule.error->headers)
      res.set_header(name, value);
    sendBody(res, rule.error->status, rule.error->body, "application/json",
             rule.disconnectAfterBytes);
    return;
  }
  if (!rule.raw.empty()) {
    sendRaw(res, held, rule);
    return;
  }
  ConcreteReply reply = makeReply(*rule.reply, ctx, groups, options.created);
  adjustUsage(reply.usage, rule.reply->usage, cachedTokens);
  if (ctx.stream) {
    sendStream(res, rule, std::move(reply), ctx.includeUsage, protocol);
    return;
  }
  std::string whole;
  switch (protocol) {
    case WireProtocol::Chat:
      whole = completionBody(reply);
      break;
    case WireProtocol::Anthropic:
      whole = anthropicMessageBody(reply);
      break;
    case WireProtocol::Responses:
      whole = responsesBody(reply);
      break;
    case WireProtocol::Gemini:
      whole = geminiBody(reply);
      break;
  }
  sendBody(res, 200, std::move(whole), "application/json", rule.disconnectAfterBytes);
}

void MockServer::Impl::install() {
  http::ServerLimits limits;
  limits.workers = static_cast<std::size_t>(options.threads);
  // A mock takes what a client sends: a whole long conversation, big headers of a test.
  limits.maxBodyBytes = std::size_t{1} << 30;
  limits.maxHeadBytes = std::size_t{1} << 20;
  limits.maxHeaders = 10'000;
  limits.maxQueue = 1'000'000;
  server = std::make_unique<http::Server>(limits);
  server->set_keep_alive_max_count(1000);
  server->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handleChat(req, res, WireProtocol::Chat);
  });
  // The same scripts, answered in the protocol each request came in.
  server->Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    handleChat(req, res, WireProtocol::Anthropic);
  });
  server->Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handleChat(req, res, WireProtocol::Responses);
  });
  // Gemini (docs/mock.md): generateContent and streamGenerateContent under /v1beta, where
  // Google's SDKs send them, and /v1; countTokens; models.list.
  server->Post(R"(/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 handleChat(req, res, WireProtocol::Gemini);
               });
  server->Post(R"(/v1(?:beta)?/models/([^/:]+):countTokens)", [this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    const std::string model = req.matches[1];
    handleCount(req, res, "count_tokens", [this, &model](const json& body) {
      json request = body.value("generateContentRequest", json());
      if (request.is_null()) request = json{{"contents", body.value("contents", json())}};
      const ChatContext ctx = describeRequest(chatRequestFromGemini(request, model, false), 0);
      return json{{"totalTokens", promptTokensOf(ctx)}};
    });
  });
  // Gemini's context caches (gemini_caches.hpp).
  server->Post(R"(/v1(?:beta)?/cachedContents)", [this](const httplib::Request& req,
                                                        httplib::Response& res) {
    handleGeminiCache(req, res, [&] {
      const json body = parseJson(req.body, {}, /*allowExceptions=*/false);
      return geminiCaches.create(
          body, now(), [this](const json& content, const std::string& model) {
            return promptTokensOf(describeRequest(chatRequestFromGemini(content, model, false), 0));
          });
    });
  });
  server->Get(R"(/v1(?:beta)?/(cachedContents/[^/]+))", [this](const httplib::Request& req,
                                                               httplib::Response& res) {
    handleGeminiCache(req, res, [&] { return geminiCaches.get(req.matches[1], now()); });
  });
  server->Delete(R"(/v1(?:beta)?/(cachedContents/[^/]+))",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   handleGeminiCache(req, res, [&] {
                     geminiCaches.remove(req.matches[1], now());
                     return json::object();
                   });
                 });
  server->Get("/v1beta/models", [this](const httplib::Request& req, httplib::Response& res) {
    notify(record(req));
    res.set_content(geminiModelList(options.models), "application/json");
  });
  server->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    notify(record(req));
    if (req.has_header("x-goog-api-key") || req.has_param("key")) {  // Gemini's format, one page
      res.set_content(geminiModelList(options.models), "application/json");
      return;
    }
    json data = json::array();
    if (req.has_header("anthropic-version")) {  // Anthropic's format, one page
      for (const auto& m : options.models) {
        data.push_back({{"type", "model"},
                        {"id", m},
                        {"display_name", "Parley " + m},
                        {"created_at", "2025-01-01T00:00:00Z"}});
      }
      res.set_content(
          json{{"data", data},
               {"has_more", false},
               {"first_id", options.models.empty() ? json() : json(options.models.front())},
               {"last_id", options.models.empty() ? json() : json(options.models.back())}}
              .dump(),
          "application/json");
      return;
    }
    for (const auto& m : options.models) {
      data.push_back(
          {{"id", m}, {"object", "model"}, {"created", options.created}, {"owned_by", "parley"}});
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  server->Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    notify(record(req));
    std::string id = req.matches[1];
    for (const auto& m : options.models) {
      if (m == id) {
        res.set_content(json{{"id", m},
                             {"object", "model"},
                             {"created", options.created},
                             {"owned_by", "parley"}}
                            .dump(),
                        "application/json");
        return;
      }
    }
    res.status = 404;
    res.set_content(errorBody("The model '" + id + "' does not exist", "invalid_request_error"),
                    "application/json");
  });
  server->Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    notify(record(req));
    json body = parseJson(req.body, {}, /*allowExceptions=*/false);
    try {
      if (body.is_discarded()) throw ValidationError("body", "not valid JSON");
      res.set_content(embeddingsResponse(body, options.embeddingDimensions).dump(),
                      "application/json");
    } catch (const ValidationError& e) {
      res.status = 400;
      res.set_content(errorBody(e.what(), "invalid_request_error"), "application/json");
    }
  });
  // Counting without generating, by the rule behind a reply's prompt_tokens (docs/mock.md,
  // "Counting routes"): Anthropic's count_tokens, llama.cpp's /apply-template and /tokenize.
  server->Post("/v1/messages/count_tokens",
               [this](const httplib::Request& req, httplib::Response& res) {
                 handleCount(req, res, "count_tokens", [this](const json& body) {
                   if (body.is_object() && body.contains("max_tokens")) {
                     throw ValidationError("max_tokens", "Extra inputs are not permitted");
                   }
                   json asMessage = body;
                   if (asMessage.is_object()) asMessage["max_tokens"] = 1;
                   const ChatContext ctx = describeRequest(chatRequestFromAnthropic(asMessage), 0);
                   return json{{"input_tokens", promptTokensOf(ctx)}};
                 });
               });
  server->Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
    handleCount(req, res, "apply_template", [](const json& body) {
      describeRequest(body, 0);  // refuses what a chat request would refuse
      return json{{"prompt", renderTemplate(body)}};
    });
  });
  server->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handleCount(req, res, "tokenize", [this](const json& body) {
      if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
        throw ValidationError("content", "expected a string");
      }
      const std::string& content = body["content"].get_ref<const std::string&>();
      const std::int64_t count =
          content.empty() ? 0 : scaledPromptTokens(mockTokens(textBytes(content)));
      json tokens = json::array();
      for (std::int64_t i = 0; i < count; ++i)
        tokens.push_back(1000 + i % 30000);
      return json{{"tokens", std::move(tokens)}};
    });
  });
  // Anything else is recorded too, then answered 404 as OpenAI does.
  auto notFound = [this](const httplib::Request& req, httplib::Response& res) {
    notify(record(req));
    res.status = 404;
    res.set_content(errorBody("parley mock: no route for " + req.method + " " + req.path,
                              "invalid_request_error"),
                    "application/json");
  };
  server->Get(".*", notFound);
  server->Post(".*", notFound);
  server->Put(".*", notFound);
  server->Delete(".*", notFound);
  server->Patch(".*", notFound);
}

MockServer::MockServer(MockOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.threads < 1) throw ValidationError("threads", "must be at least 1");
  if (options.embeddingDimensions < 1) {
    throw ValidationError("embeddingDimensions", "must be at least 1");
  }
  if (!(options.promptTokensScale > 0)) {
    throw ValidationError("promptTokensScale", "must be a positive number");
  }
  impl_->options = std::move(options);
  impl_->promptCache = PromptCache(impl_->options.promptCache);
  impl_->geminiCaches = GeminiCacheStore(impl_->options.geminiCaches);
  setScript(impl_->options.script);
  impl_->install();
}

MockServer::~MockServer() {
  stop();
}

void MockServer::start() {
  Impl& s = *impl_;
  if (s.started) throw Error("parley mock: start() called twice");
  s.port = s.server->start(s.options.host, s.options.port, "parley mock");
  s.started = true;
}

void MockServer::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.stopMutex);
    s.stopping = true;
  }
  s.stopCv.notify_all();
  if (s.server) s.server->shutdown();
}

int MockServer::port() const {
  return impl_->port;
}

std::string MockServer::baseUrl() const {
  const std::string& host = impl_->options.host;
  bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(impl_->port) + "/v1";
}

std::vector<json> MockServer::requests() const {
  std::lock_guard lock(impl_->mutex);
  return {impl_->recorded.begin(), impl_->recorded.end()};
}

void MockServer::clearRequests() {
  std::lock_guard lock(impl_->mutex);
  impl_->cleared += impl_->recorded.size();
  impl_->recorded.clear();
}

bool MockServer::waitForRequests(std::size_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->recordedCv.wait_for(
      lock, timeout, [&] { return impl_->cleared + impl_->recorded.size() >= count; });
}

void MockServer::setScript(const json& script) {
  Script compiled = compileScript(script.is_null() ? demoScript() : script);
  std::lock_guard lock(impl_->mutex);
  impl_->script = std::make_shared<const Script>(std::move(compiled));
  impl_->ruleUses.assign(impl_->script->size(), 0);
  impl_->chatRequests = 0;
  impl_->promptCache.clear();
}

}  // namespace parley::mock
