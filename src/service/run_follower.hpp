// Following one run through its thread's event log, for the routes that answer in another
// protocol's shapes (OpenAI-compatible endpoints, UI streams): RunFollower reads the events of
// the one vocabulary (event_types.hpp) as they come and gathers the run's answer (its replies'
// text, usage, the client's tool calls it waits for, its end); the encoders turn each step into
// their protocol. Also the OpenAI error shape these routes answer with. Internal to
// src/service/.
//
// Thread-safety: a RunFollower belongs to one request; openAiRoute() handlers may run at once.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/logger.hpp"
#include "parley/run_store.hpp"
#include "parley/usage.hpp"
#include "service/api.hpp"
#include "service/event_feeds.hpp"

namespace parley::service {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with `status`.
struct OpenAiError : std::runtime_error {
  OpenAiError(int status, std::string type, std::string code, const std::string& message,
              std::string param)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        code(std::move(code)),
        param(std::move(param)) {}
  int status;
  std::string type;
  std::string code;
  std::string param;
  nlohmann::json body() const;
};

// A route whose errors are OpenAI's shape, with "param" (api.hpp's ApiError is answered as
// such too; a store's own message goes to the log only: it may name the database).
httplib::Server::Handler openAiRoute(
    Logger log, std::function<void(const httplib::Request&, httplib::Response&)> handler);

// A call of one of the client's tools (SubmitOptions::clientTools) the run waits for.
struct ClientToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// What a run answered, as far as it was followed.
struct RunAnswer {
  std::string text;   // every reply's text, in order, replies joined by a blank line
  TokenUsage usage;   // summed over the run's replies
  std::string model;  // as the last reply names it
  std::string finishReason;
  std::vector<ClientToolCall> clientCalls;  // the run waits for their outputs
  nlohmann::json wait;                      // a wait for a person (approval, question), else null
  std::optional<OpenAiError> error;         // the run failed, was cancelled or timed out
};

// Reads a run's events, in order, into its answer.
class AnswerBuilder {
 public:
  AnswerBuilder(RunStore& runs, RunInfo run) : runs_(runs), run_(std::move(run)) {}
  // One event of the run; the reply text it adds (with the blank line between replies), if any.
  std::vector<std::string> handle(const StoredEvent& event);
  bool done() const { return done_; }
  bool finished() const { return finished_; }
  RunAnswer& answer() { return answer_; }
  const RunAnswer& answer() const { return answer_; }
  const RunInfo& run() const { return run_; }
  void giveUp(OpenAiError error) {
    done_ = true;
    answer_.error = std::move(error);
  }

 private:
  void end(const StoredEvent& event);

  RunStore& runs_;
  RunInfo run_;
  bool done_ = false;
  bool finished_ = false;
  bool separate_ = false;      // a reply with text ended: the next text starts after a blank line
  std::string streamedReply_;  // text streamed since the last reply
  // The last reply announced (message_added) made tool calls: a client-tools wait needs not
  // add its text again from the journal.
  bool announcedCalls_ = false;
  RunAnswer answer_;
};

// The answer of a run so far, read from its thread's event log at once (no waiting).
AnswerBuilder replayRun(RunStore& runs, const RunInfo& run);

class RunFollower {
 public:
  // Follows `run` on its thread from event `after`. Its replies are the assistant messages with
  // a received_at (a model's; the routes drop a client's copy of it from the input).
  RunFollower(RunStore& runs, EventFeeds& feeds, RunInfo run, int64_t after = 0);
  ~RunFollower();
  RunFollower(const RunFollower&) = delete;
  RunFollower& operator=(const RunFollower&) = delete;

  struct Step {
    std::vector<std::string> text;    // reply text that came (with the blank line between
                                      // replies), in order
    std::vector<StoredEvent> events;  // the run's events read, in order
    bool ended = false;               // the thread was deleted, or the service stops
    bool parked = false;  // nothing yet, and the stream was parked (EventFeeds::Batch::parked)
  };
  // Waits for events until `wakeBy`; past `deadline` the run is given up (a timeout error).
  // Within a turn of a stream served in turns, parks instead of waiting (`parked`).
  Step step(std::chrono::steady_clock::time_point wakeBy,
            std::chrono::steady_clock::time_point deadline);
  // The run ended, waits, or was given up: answer() is final.
  bool done() const { return answer_.done(); }
  // The run reached a finished state (not waiting, not given up).
  bool finished() const { return answer_.finished(); }
  const RunAnswer& answer() const { return answer_.answer(); }
  const RunInfo& run() const { return answer_.run(); }
  int64_t lastSeq() const { return after_; }

  // Once done or abandoned: a run that is not finished is cancelled unless `keep` (a run given
  // up at its deadline always; a run waiting for the client's tools too, with `cancelClientWait`: a
  // Chat Completions client sends the outputs with a new request); without `keep` the thread is
  // deleted, unless the run waits for a person (the error names the run to answer). Idempotent.
  void close(bool keep, bool cancelClientWait = true);

 private:
  RunStore& runs_;
  EventFeeds& feeds_;
  AnswerBuilder answer_;
  EventFeeds::Subscription feed_;
  int64_t after_ = 0;
  bool closed_ = false;
};

// Follows until done (or deadline).
void followToEnd(RunFollower& run, std::chrono::steady_clock::time_point deadline);

}  // namespace parley::service
