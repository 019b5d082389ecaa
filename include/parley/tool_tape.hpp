// ToolTape: the tool results of a run, recorded once and replayed instead of running the tools
// (docs/cassettes.md, "Whole runs"). Cassettes replay the model calls; a tape replays the tool
// calls, so a recorded run of the executor, `parley ask`/`chat` or any ConversationManager::run
// replays whole: no model is asked, no tool runs, and the history is the recorded one byte for
// byte. (A durable run replays from its own journal instead: run_replay.hpp.)
//
// The file is JSON Lines in the one event vocabulary (event_types.hpp): for each call, a
// `tool_execution_request` line (header + "payload": tool_call_id, tool_name, arguments) and then
// a `tool_execution_completed` line (its result as the model got it: success, result or error).
// The result is the call's final one, whatever settled it: the tool, a refused approval, an
// unknown tool, a timeout. Lines of other types are skipped, so any log of the vocabulary reads.
// The tape is written where the loop receives the results (ConversationManager::run), because
// only there is every call's result known: the executor's bus never carries the result of a call
// it refused or that timed out.
//
// Replay matches each call of a reply with the first recorded call of the same id not yet taken
// (in the same thread when `byThread`; ids come from the model's reply, i.e. from the cassette).
// A call the tape does not hold, one of another tool or other arguments, or one without a result
// is a ReplayMiss naming the call, its tool and the message of the reply that made it.
//
// Owned by the core. Thread-safety: every member may be called from any thread (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parley/errors.hpp"
#include "parley/tools.hpp"

namespace parley {

// A replay that departs from its recording: a tool call the recording has no result for, or one
// of another tool or arguments, a run that ends otherwise than it did, a thread that differs
// (what() names the run, call or message). Thrown by a tape's replay and by a durable run's
// (run_replay.hpp).
class ReplayMiss : public ValidationError {
 public:
  explicit ReplayMiss(const std::string& reason) : ValidationError("replay", reason) {}
};

struct ToolTapeOptions {
  // The largest tape replay() reads (a larger file is a ValidationError naming it); each call's
  // lines are written whole, so a recording past it is refused when replayed, not truncated.
  size_t maxBytes = size_t{256} << 20;
  // Replay: match calls within the thread the run names (the executor's thread ids); false: the
  // whole tape is one conversation (`parley ask`/`chat`, whose replayed thread gets a new id).
  bool byThread = false;
};

class ToolTape {
 public:
  // A tape recording into `file` (appended to; its folder is made). StoreError if it cannot be
  // opened.
  static std::shared_ptr<ToolTape> record(const std::filesystem::path& file);
  // A tape replaying `file`. ValidationError for a file that is missing, too large or not
  // JSON Lines of the vocabulary (naming the line).
  static std::shared_ptr<ToolTape> replay(const std::filesystem::path& file,
                                          ToolTapeOptions options = {});

  bool replaying() const { return replaying_; }
  // Calls on the tape: read (replay) or written so far (record).
  size_t calls() const;
  // Replay: the recorded results of the calls of the reply at storage index `message` of thread
  // `thread` ("" when the run names none), in the calls' order; ReplayMiss as above.
  std::vector<ToolResult> take(const std::string& thread, int64_t message,
                               const std::vector<ToolCall>& calls);
  // Record: appends each call and its result (two lines each), flushed. StoreError on a failed
  // write.
  void write(const std::string& thread, const std::vector<ToolCall>& calls,
             const std::vector<ToolResult>& results);

  struct Entry;
  ~ToolTape();

 private:
  ToolTape();
  bool replaying_ = false;
  ToolTapeOptions options_;
  std::filesystem::path file_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  size_t written_ = 0;
};

}  // namespace parley
