#include "service/agent_protocol_stream.hpp"

#include <charconv>

#include "parley/errors.hpp"

namespace parley::service {

using json = nlohmann::json;

namespace {

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// The graph node a message comes from, as LangGraph's prebuilt agent names them.
const char* nodeOf(Role role) {
  switch (role) {
    case Role::Assistant:
      return "agent";
    case Role::Tool:
      return "tools";
    default:
      return "__start__";
  }
}

json parseArguments(const std::string& text) {
  if (text.empty()) return json::object();
  json args = json::parse(text, nullptr, false);
  return args.is_discarded() ? json(text) : args;
}

}  // namespace

std::string langGraphMessageId(const std::string& threadId, int64_t index) {
  return "msg-" + threadId + "-" + std::to_string(index);
}

json toLangGraphMessage(const Message& message, const std::string& id) {
  const json openai = toJson(message);
  json out = {
      {"id", id},
      {"content",
       openai.contains("content") && !openai["content"].is_null() ? openai["content"] : json("")},
      {"additional_kwargs", json::object()},
      {"response_metadata", json::object()}};
  switch (message.role) {
    case Role::User:
      out["type"] = "human";
      break;
    case Role::Assistant: {
      out["type"] = "ai";
      json calls = json::array();
      for (const auto& call : message.toolCalls) {
        calls.push_back({{"name", call.name},
                         {"args", parseArguments(call.arguments)},
                         {"id", call.id},
                         {"type", "tool_call"}});
      }
      out["tool_calls"] = std::move(calls);
      out["invalid_tool_calls"] = json::array();
      break;
    }
    case Role::Tool:
      out["type"] = "tool";
      out["tool_call_id"] = openai.value("tool_call_id", "");
      break;
    default:
      out["type"] = "system";
      break;
  }
  if (!message.name.empty()) out["name"] = message.name;
  return out;
}

Message fromLangGraphMessage(const json& value, const std::string& field) {
  if (!value.is_object()) throw ValidationError(field, "must be a message object");
  std::string role;
  if (value.contains("role") && value["role"].is_string()) {
    role = value["role"].get<std::string>();
  } else if (value.contains("type") && value["type"].is_string()) {
    role = value["type"].get<std::string>();
  } else {
    throw ValidationError(field, "needs a \"type\" (human, ai, tool, system) or a \"role\"");
  }
  if (role == "human") role = "user";
  if (role == "ai") role = "assistant";
  if (role != "user" && role != "assistant" && role != "system" && role != "tool") {
    throw ValidationError(field + ".type", "'" + role + "' is not human, ai, tool or system");
  }
  json openai = {{"role", role}};
  openai["content"] = value.contains("content") ? value["content"] : json("");
  if (value.contains("name")) openai["name"] = value["name"];
  if (value.contains("tool_call_id")) openai["tool_call_id"] = value["tool_call_id"];
  if (value.contains("tool_calls") && value["tool_calls"].is_array() &&
      !value["tool_calls"].empty()) {
    json calls = json::array();
    for (const auto& call : value["tool_calls"]) {
      if (!call.is_object()) throw ValidationError(field + ".tool_calls", "must be objects");
      if (call.contains("function")) {
        calls.push_back(call);  // OpenAI's form already
        continue;
      }
      const json args = call.value("args", json::object());
      calls.push_back(
          {{"id", call.value("id", "")},
           {"type", "function"},
           {"function",
            {{"name", call.value("name", "")},
             {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
    }
    openai["tool_calls"] = std::move(calls);
  }
  try {
    return messageFromJson(openai);
  } catch (const ValidationError& e) {
    throw ValidationError(field, e.what());
  }
}

json langGraphInterrupt(const json& wait) {
  json value = wait;
  if (wait.is_object() && wait.value("kind", "") == "approval") {
    // LangChain's human-in-the-loop request beside parley's fields, so that a UI that knows it
    // (LangGraph's Agent Chat UI) offers approve and reject; command.resume {"decisions": [...]}
    // answers it.
    const std::string tool = wait.value("tool", "");
    json args = json::object();
    try {
      args = json::parse(wait.value("arguments", "{}"));
    } catch (const json::exception&) {
    }
    if (!args.is_object()) args = {{"arguments", wait.value("arguments", "")}};
    value["action_requests"] =
        json::array({{{"name", tool}, {"args", args}, {"description", wait.value("prompt", "")}}});
    value["review_configs"] =
        json::array({{{"action_name", tool}, {"allowed_decisions", {"approve", "reject"}}}});
  }
  json out = {{"value", std::move(value)}, {"when", "during"}, {"resumable", true}};
  if (wait.is_object() && wait.contains("tool_call_id")) out["id"] = wait["tool_call_id"];
  return out;
}

StreamModes parseStreamModes(const json& value) {
  StreamModes modes;
  if (value.is_null()) {
    modes.values = true;
    return modes;
  }
  std::vector<json> given;
  if (value.is_string()) {
    given.push_back(value);
  } else if (value.is_array()) {
    if (value.size() > 16) throw ValidationError("stream_mode", "at most 16 modes");
    given.assign(value.begin(), value.end());
  } else {
    throw ValidationError("stream_mode", "must be a mode or a list of modes");
  }
  for (const auto& mode : given) {
    if (!mode.is_string()) throw ValidationError("stream_mode", "modes are strings");
    const std::string name = mode.get<std::string>();
    if (name == "values") {
      modes.values = true;
    } else if (name == "updates") {
      modes.updates = true;
    } else if (name == "messages-tuple") {
      modes.messagesTuple = true;
    } else if (name == "messages") {
      modes.messages = true;
    } else if (name == "events") {
      modes.events = true;
    } else if (name == "custom") {
      modes.custom = true;
    } else {
      throw ValidationError("stream_mode",
                            "'" + name.substr(0, 64) +
                                "' is not streamed by parley (values, updates, messages, "
                                "messages-tuple, events, custom; a parley run has no graph steps "
                                "to show as debug, tasks or checkpoints)");
    }
  }
  if (given.empty()) modes.values = true;
  return modes;
}

std::optional<StreamPosition> parseStreamPosition(const std::string& lastEventId) {
  if (lastEventId.empty() || lastEventId.size() > 40) return std::nullopt;
  const size_t dash = lastEventId.find('-');
  StreamPosition at;
  auto seq = parseInt(std::string_view(lastEventId).substr(0, dash));
  if (!seq) return std::nullopt;
  at.seq = *seq;
  if (dash != std::string::npos) {
    auto part = parseInt(std::string_view(lastEventId).substr(dash + 1));
    if (!part) return std::nullopt;
    at.part = *part;
  }
  return at;
}

RunStreamEncoder::RunStreamEncoder(std::string threadId, std::string runId, StreamModes modes,
                                   std::map<int64_t, Message> view,
                                   std::optional<StreamPosition> resumeAfter, bool metadata)
    : threadId_(std::move(threadId)),
      runId_(std::move(runId)),
      modes_(modes),
      view_(std::move(view)),
      resumeAfter_(resumeAfter),
      metadata_(metadata) {
  messages_ = view_;
  if (!view_.empty()) lastIndex_ = view_.rbegin()->first;
}

std::string RunStreamEncoder::start() const {
  if (!metadata_) return "";
  return "event: metadata\ndata: " + dump({{"run_id", runId_}, {"thread_id", threadId_}}) + "\n\n";
}

std::string RunStreamEncoder::end() {
  return "event: end\ndata: null\n\n";
}

std::string RunStreamEncoder::send(int64_t seq, const std::string& name, const json& data) {
  const int64_t part = part_++;
  if (resumeAfter_ &&
      (seq < resumeAfter_->seq ||
       (seq == resumeAfter_->seq && (resumeAfter_->part < 0 || part <= resumeAfter_->part)))) {
    return "";  // the client has it
  }
  return "id: " + std::to_string(seq) + "-" + std::to_string(part) + "\nevent: " + name +
         "\ndata: " + dump(data) + "\n\n";
}

json RunStreamEncoder::values() const {
  json messages = json::array();
  for (const auto& [index, message] : messages_)
    messages.push_back(toLangGraphMessage(message, langGraphMessageId(threadId_, index)));
  return {{"messages", std::move(messages)}};
}

void RunStreamEncoder::emitValues(int64_t seq, const json& extra, std::string& out) {
  if (!modes_.values) return;
  json state = values();
  for (const auto& [key, value] : extra.items())
    state[key] = value;
  out += send(seq, "values", state);
}

json RunStreamEncoder::tupleMetadata(const std::string& node) const {
  return {{"run_id", runId_},
          {"thread_id", threadId_},
          {"langgraph_node", node},
          {"tags", json::array()}};
}

std::string RunStreamEncoder::feed(const StoredEvent& event) {
  std::string out;
  if (done_ || event.runId != runId_) return out;
  part_ = 0;
  const json& p = event.payload;
  const std::string& type = event.type;
  if (modes_.custom) out += send(event.seq, "custom", {{"type", type}, {"payload", p}});

  if (type == "message_added" && p.contains("message")) {
    Message message;
    try {
      message = messageFromJson(p["message"]);
    } catch (const std::exception&) {
      return out;  // not one of ours to encode
    }
    const int64_t index = p.value("index", lastIndex_ + 1);
    if (!started_) {
      // The state before the run: the view's messages below its first.
      started_ = true;
      messages_.erase(messages_.lower_bound(index), messages_.end());
    }
    messages_[index] = message;
    lastIndex_ = std::max(lastIndex_, index);
    const std::string id = langGraphMessageId(threadId_, index);
    const json lc = toLangGraphMessage(message, id);
    const std::string node = nodeOf(message.role);
    const bool produced = message.role == Role::Assistant || message.role == Role::Tool;
    if (produced && modes_.messagesTuple && !(message.role == Role::Assistant && chunked_)) {
      out += send(event.seq, "messages", json::array({lc, tupleMetadata(node)}));
    }
    if (produced && modes_.messages) {
      if (!chunked_ || message.role != Role::Assistant) {
        out += send(event.seq, "messages/metadata", {{id, {{"metadata", tupleMetadata(node)}}}});
      }
      out += send(event.seq, "messages/complete", json::array({lc}));
    }
    if (produced && modes_.updates) {
      out += send(event.seq, "updates", {{node, {{"messages", json::array({lc})}}}});
    }
    if (produced && modes_.events && message.role == Role::Assistant) {
      out += send(event.seq, "events",
                  {{"event", "on_chat_model_end"},
                   {"name", "model"},
                   {"run_id", runId_},
                   {"tags", json::array()},
                   {"metadata", tupleMetadata(node)},
                   {"parent_ids", json::array()},
                   {"data", {{"output", lc}}}});
    }
    emitValues(event.seq, json::object(), out);
    if (message.role == Role::Assistant) {
      partial_.clear();
      chunked_ = false;
    }
    return out;
  }
  if (type == "llm_stream_chunk") {
    const std::string text = p.value("content", "");
    if (text.empty()) return out;
    const std::string id = langGraphMessageId(threadId_, lastIndex_ + 1);
    const bool first = !chunked_;
    chunked_ = true;
    partial_ += text;
    json chunk = {{"type", "AIMessageChunk"},
                  {"id", id},
                  {"content", text},
                  {"tool_calls", json::array()},
                  {"tool_call_chunks", json::array()},
                  {"additional_kwargs", json::object()},
                  {"response_metadata", json::object()}};
    if (modes_.messagesTuple) {
      out += send(event.seq, "messages", json::array({chunk, tupleMetadata("agent")}));
    }
    if (modes_.messages) {
      if (first) {
        out += send(event.seq, "messages/metadata", {{id, {{"metadata", tupleMetadata("agent")}}}});
      }
      json whole = chunk;
      whole["type"] = "ai";
      whole["content"] = partial_;
      out += send(event.seq, "messages/partial", json::array({whole}));
    }
    if (modes_.events) {
      out += send(event.seq, "events",
                  {{"event", "on_chat_model_stream"},
                   {"name", "model"},
                   {"run_id", runId_},
                   {"tags", json::array()},
                   {"metadata", tupleMetadata("agent")},
                   {"parent_ids", json::array()},
                   {"data", {{"chunk", chunk}}}});
    }
    return out;
  }
  if (modes_.events && (type == "tool_execution_request" || type == "tool_execution_completed" ||
                        type == "run_started")) {
    json data = json::object();
    std::string name = p.value("tool_name", "");
    std::string kind;
    if (type == "run_started") {
      kind = "on_chain_start";
      name = "LangGraph";
    } else if (type == "tool_execution_request") {
      kind = "on_tool_start";
      data["input"] = parseArguments(p.value("arguments", ""));
    } else {
      kind = "on_tool_end";
      data["output"] = p.contains("result") ? p["result"] : p.value("error", json());
    }
    out += send(event.seq, "events",
                {{"event", kind},
                 {"name", name},
                 {"run_id", runId_},
                 {"tags", json::array()},
                 {"metadata", tupleMetadata(type == "run_started" ? "" : "tools")},
                 {"parent_ids", json::array()},
                 {"data", data}});
    return out;
  }
  if (type == "run_waiting") {
    const json interrupt = langGraphInterrupt(p.value("wait", json::object()));
    if (modes_.updates) {
      out += send(event.seq, "updates", {{"__interrupt__", json::array({interrupt})}});
    }
    emitValues(event.seq, {{"__interrupt__", json::array({interrupt})}}, out);
    // A wait the client has seen was answered since: the stream goes on past it.
    done_ = !(resumeAfter_ && event.seq <= resumeAfter_->seq);
    return out;
  }
  if (type == kRunCompletedEventType) {
    if (modes_.events) {
      out += send(event.seq, "events",
                  {{"event", "on_chain_end"},
                   {"name", "LangGraph"},
                   {"run_id", runId_},
                   {"tags", json::array()},
                   {"metadata", json::object()},
                   {"parent_ids", json::array()},
                   {"data", {{"output", values()}}}});
    }
    done_ = true;
    return out;
  }
  if (type == kRunFailedEventType) {
    if (!p.value("cancelled", false)) {
      out += send(event.seq, "error",
                  {{"error", "RunError"}, {"message", p.value("error", "the run failed")}});
    }
    done_ = true;
  }
  return out;
}

}  // namespace parley::service
