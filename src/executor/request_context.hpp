// What the parts of the executor share about the request they serve: the header of an event a
// request causes, and where diagnostics go. Internal to src/executor/.
#pragma once

#include <iostream>
#include <string>

#include "parley/events.hpp"
#include "parley/executor.hpp"
#include "parley/telemetry.hpp"

namespace parley::detail {

// The header of an event caused by `request`: same workflow, thread and trace.
// With `spanId`: the event belongs to that model call of the request.
template <typename Event>
Event causedBy(const LlmExecutionRequest& request, const std::string& spanId = {}) {
  Event event;
  event.workflowId = request.workflowId;
  event.threadId = request.threadId;
  event.traceId = request.traceId;
  event.spanId = spanId;
  // Under the span at work now (the run's, a model call's), else the request's own parent.
  const TraceContext current = currentTraceContext();
  event.traceparent = current.valid() ? current.traceparent() : request.traceparent;
  return event;
}

// ExecutorOptions::log, or stderr when it is not set.
inline void logLine(const ExecutorOptions& options, const std::string& line) {
  writeLog(options.log, line);
}

}  // namespace parley::detail
