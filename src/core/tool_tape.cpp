// ToolTape (parley/tool_tape.hpp, docs/cassettes.md "Whole runs"): tool results recorded as
// JSON Lines of the event vocabulary and replayed in their place.
#include "parley/tool_tape.hpp"

#include <fstream>
#include <sstream>

#include "parley/errors.hpp"
#include "parley/event_types.hpp"

namespace parley {

using json = nlohmann::json;

struct ToolTape::Entry {
  std::string thread;
  ToolCall call;
  std::optional<ToolExecutionOutcome> result;
  bool taken = false;
};

ToolTape::ToolTape() = default;
ToolTape::~ToolTape() = default;

namespace {

// The tape's line of an event: its header and its payload.
json tapeLine(const EventHeader& header, json payload) {
  json line = eventHeaderToJson(header);
  line["payload"] = std::move(payload);
  return line;
}

ToolResult tapeResult(const ToolCall& call, const ToolExecutionOutcome& outcome) {
  ToolResult r;
  r.toolCallId = call.id;
  r.name = call.name;
  r.success = outcome.success;
  r.result = outcome.result;
  r.error = outcome.error;
  r.errorKind = outcome.success    ? ToolErrorKind::None
                : outcome.timedOut ? ToolErrorKind::Timeout
                                   : ToolErrorKind::HandlerFailed;
  r.executionTime = outcome.executionTime;
  r.retryCount = outcome.retryCount;
  return r;
}

}  // namespace

std::shared_ptr<ToolTape> ToolTape::record(const std::filesystem::path& file) {
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  std::ofstream probe(file, std::ios::app);
  if (!probe) throw StoreError("tool tape: cannot open " + file.string() + " for writing");
  std::shared_ptr<ToolTape> tape(new ToolTape());
  tape->file_ = file;
  return tape;
}

std::shared_ptr<ToolTape> ToolTape::replay(const std::filesystem::path& file,
                                           ToolTapeOptions options) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) throw ValidationError("tool tape", "cannot read " + file.string() + ": " + ec.message());
  if (size > options.maxBytes) {
    throw ValidationError("tool tape", file.string() + " holds " + std::to_string(size) +
                                           " bytes, more than the " +
                                           std::to_string(options.maxBytes) + " a tape may hold");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ValidationError("tool tape", "cannot read " + file.string());
  std::shared_ptr<ToolTape> tape(new ToolTape());
  tape->replaying_ = true;
  tape->options_ = options;
  tape->file_ = file;
  std::string text;
  size_t lineNo = 0;
  while (std::getline(in, text)) {
    ++lineNo;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file.string() + " line " + std::to_string(lineNo);
    json line = json::parse(text, nullptr, false);
    if (!line.is_object() || !line.contains("type") || !line["type"].is_string()) {
      throw ValidationError("tool tape", where + " is not an event of the vocabulary");
    }
    const std::string type = line["type"];
    const bool request = type == eventName(EventType::ToolExecutionRequest);
    const bool completed = type == eventName(EventType::ToolExecutionCompleted);
    const bool failed = type == eventName(EventType::ToolExecutionFailed);
    if (!request && !completed && !failed) continue;
    const json payload = line.value("payload", json::object());
    if (!payload.is_object()) throw ValidationError("tool tape", where + ": payload not an object");
    const std::string thread = line.value("thread_id", "");
    try {
      if (request) {
        Entry e;
        e.thread = thread;
        e.call = eventFromJson<ToolExecutionRequest>(payload).toolCall;
        tape->entries_.push_back(std::move(e));
        continue;
      }
      ToolExecutionOutcome outcome;
      std::string id;
      if (completed) {
        auto done = eventFromJson<ToolExecutionCompleted>(payload);
        id = done.toolCallId;
        outcome = std::move(done.result);
      } else {
        auto gone = eventFromJson<ToolExecutionFailed>(payload);
        id = gone.toolCallId;
        outcome.error = gone.error;
      }
      // The result answers the latest call of that id still without one.
      Entry* open = nullptr;
      for (auto it = tape->entries_.rbegin(); it != tape->entries_.rend() && !open; ++it) {
        if (it->call.id == id && it->thread == thread && !it->result) open = &*it;
      }
      if (!open) {
        throw ValidationError("tool tape",
                              where + ": a result for call " + id + ", which no request precedes");
      }
      open->result = std::move(outcome);
    } catch (const ValidationError& e) {
      if (e.field() == "tool tape") throw;
      throw ValidationError("tool tape", where + ": " + e.what());
    }
  }
  return tape;
}

size_t ToolTape::calls() const {
  std::lock_guard lock(mutex_);
  return replaying_ ? entries_.size() : written_;
}

std::vector<ToolResult> ToolTape::take(const std::string& thread, int64_t message,
                                       const std::vector<ToolCall>& calls) {
  std::lock_guard lock(mutex_);
  std::vector<ToolResult> out;
  out.reserve(calls.size());
  for (const ToolCall& call : calls) {
    const std::string where = "call " + call.id + " (" + call.name + ") of the reply at message " +
                              std::to_string(message) +
                              (thread.empty() ? std::string() : " of thread " + thread);
    Entry* found = nullptr;
    for (Entry& e : entries_) {
      if (e.taken || e.call.id != call.id) continue;
      if (options_.byThread && e.thread != thread) continue;
      found = &e;
      break;
    }
    if (!found) throw ReplayMiss(where + " is not in the recording " + file_.string());
    if (found->call.name != call.name) {
      throw ReplayMiss(where + " was a call of " + found->call.name + " when recorded");
    }
    if (found->call.arguments != call.arguments) {
      throw ReplayMiss(where + " has other arguments than when recorded: " + call.arguments +
                       " instead of " + found->call.arguments);
    }
    if (!found->result) throw ReplayMiss(where + " has no result in the recording");
    found->taken = true;
    out.push_back(tapeResult(call, *found->result));
  }
  return out;
}

void ToolTape::write(const std::string& thread, const std::vector<ToolCall>& calls,
                     const std::vector<ToolResult>& results) {
  std::ostringstream lines;
  for (size_t i = 0; i < calls.size() && i < results.size(); ++i) {
    ToolExecutionRequest request;
    request.threadId = thread;
    request.toolCall = calls[i];
    ToolExecutionCompleted done;
    done.threadId = thread;
    done.toolCallId = calls[i].id;
    done.toolName = calls[i].name;
    const ToolResult& r = results[i];
    done.result.success = r.success;
    done.result.result = r.result;
    done.result.error = r.error;
    done.result.executionTime = r.executionTime;
    done.result.retryCount = r.retryCount;
    done.result.timedOut = r.errorKind == ToolErrorKind::Timeout;
    // Invalid UTF-8 in a result is written replaced, as the model got it (ToolResult::content).
    lines << tapeLine(request, eventToJson(request)).dump() << "\n"
          << tapeLine(done, eventToJson(done)).dump(-1, ' ', false, json::error_handler_t::replace)
          << "\n";
  }
  std::lock_guard lock(mutex_);
  std::ofstream out(file_, std::ios::app | std::ios::binary);
  out << lines.str();
  out.flush();
  if (!out) throw StoreError("tool tape: cannot write " + file_.string());
  written_ += std::min(calls.size(), results.size());
}

}  // namespace parley
