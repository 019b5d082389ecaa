// The LangGraph encoding of parley's events (docs/service.md, "Agent Protocol and the LangGraph
// API"): messages as LangChain messages, a thread's view as state values, and one run's stored
// events as the Server-Sent Events of the stream modes the SDK asks for (`values`, `updates`,
// `messages-tuple` sent as `messages`, `messages` as `messages/partial` / `messages/complete` /
// `messages/metadata`, `events`, `custom`), then `error` and `end`. No second vocabulary: each
// encoded event is made from one stored event of event_types.hpp. Internal to src/service/.
//
// Thread-safety: the functions are pure; a RunStreamEncoder is one stream's, used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/message.hpp"
#include "parley/run_store.hpp"

namespace parley::service {

// The id a message of a thread goes by on the LangGraph routes (state values, streams): its
// storage index makes it stable across reads.
std::string langGraphMessageId(const std::string& threadId, int64_t index);
// {"type": "human" | "ai" | "tool" | "system", "content", "id", "tool_calls" (ai: name, args,
// id), "tool_call_id" (tool), "name", "additional_kwargs", "response_metadata"}.
nlohmann::json toLangGraphMessage(const Message& message, const std::string& id);
// A message of a run's input: LangChain's form ({"type": "human", ...}) or OpenAI's ({"role":
// "user", ...}); the content a string or text/image parts. ValidationError naming the problem.
Message fromLangGraphMessage(const nlohmann::json& value, const std::string& field);

// The wait of a waiting run as a LangGraph interrupt: {"value": the wait, "id": its tool call}.
nlohmann::json langGraphInterrupt(const nlohmann::json& wait);

struct StreamModes {
  bool values = false;
  bool updates = false;
  bool messagesTuple = false;  // "messages-tuple": event "messages", [chunk, metadata]
  bool messages = false;       // "messages": messages/metadata, /partial, /complete
  bool events = false;
  bool custom = false;
};
// A mode or a list of modes (at most 16); null or absent: values. ValidationError for a mode
// parley cannot stream (debug, tasks, checkpoints), naming it.
StreamModes parseStreamModes(const nlohmann::json& value);

// Where a resumed stream starts: after the encoded event "SEQ-K" (the K-th made from the stored
// event SEQ); a plain "SEQ" resumes after every event made from SEQ. nullopt: not an id of ours.
struct StreamPosition {
  int64_t seq = 0;
  int64_t part = -1;  // -1: after all of seq's
};
std::optional<StreamPosition> parseStreamPosition(const std::string& lastEventId);

// One run's events as a LangGraph stream. Feed it the run's stored events in order, from its
// first (events of other runs are skipped), also those a resumed client has, so that the state
// and the message ids it sends are the same as the first time: it only sends what is after
// `resumeAfter`.
class RunStreamEncoder {
 public:
  // `view`: the thread's visible messages by storage index when the stream starts (the state
  // before the run is those below the run's first message). `metadata`: start() sends the
  // `metadata` event (a new stream, not a resumed one).
  RunStreamEncoder(std::string threadId, std::string runId, StreamModes modes,
                   std::map<int64_t, Message> view, std::optional<StreamPosition> resumeAfter,
                   bool metadata = true);

  // The `metadata` event a new stream starts with ("" when resuming).
  std::string start() const;
  // The SSE text made from `event` (often ""). After the run's end or its wait: done(). A wait
  // the client has seen (before resumeAfter) does not end the stream.
  std::string feed(const StoredEvent& event);
  bool done() const { return done_; }
  // The run's wait was answered since (the stream goes on with the rest of the run).
  void goOn() { done_ = false; }
  // `event: end`, the stream's last.
  static std::string end();

  // The state values the stream is at: {"messages": [...]}.
  nlohmann::json values() const;

 private:
  std::string send(int64_t seq, const std::string& name, const nlohmann::json& data);
  void emitValues(int64_t seq, const nlohmann::json& extra, std::string& out);
  nlohmann::json tupleMetadata(const std::string& node) const;

  std::string threadId_;
  std::string runId_;
  StreamModes modes_;
  std::map<int64_t, Message> view_;
  std::optional<StreamPosition> resumeAfter_;
  bool metadata_ = true;
  std::map<int64_t, Message> messages_;  // the state: the view's below the run's first, then its
  bool started_ = false;                 // the run's first message seen
  int64_t lastIndex_ = -1;               // the last message's storage index
  std::string partial_;                  // the text streamed of the reply in progress
  bool chunked_ = false;                 // the reply in progress was streamed
  int64_t part_ = 0;                     // encoded events made from the stored event at hand
  bool done_ = false;
};

}  // namespace parley::service
