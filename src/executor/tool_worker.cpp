#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "model/deadline.hpp"
#include "parley/errors.hpp"
#include "parley/executor.hpp"
#include "parley/telemetry.hpp"
#include "parley/thread_pool.hpp"

namespace parley {

namespace {

// The progress reports of a worker's calls (ToolContext::progress), published as the durable
// runs write them (tool_execution_progress) under the ids of the request each call serves. Shared
// with the handlers, which may outlive the worker when abandoned at a timeout: only a call that
// is running reports, and nothing is published once the worker is gone.
struct WorkerProgress {
  std::mutex mutex;
  EventBus* bus = nullptr;                        // null once the worker is gone
  std::multimap<std::string, EventHeader> calls;  // call id -> its request's ids, while it runs

  // Call ids are the model's, unique in a conversation; two conversations on one bus running
  // calls of the same id at once publish under the first's ids.
  void report(const ToolContext& call, const std::string& message, const nlohmann::json& data) {
    std::lock_guard lock(mutex);
    const auto running = calls.find(call.toolCallId);
    if (!bus || running == calls.end()) return;
    ToolExecutionProgress progress;
    static_cast<EventHeader&>(progress) = running->second;
    progress.type = eventName(ToolExecutionProgress::kEventType);
    progress.timestamp = std::chrono::system_clock::now();
    progress.toolCallId = call.toolCallId;
    progress.toolName = call.name;
    progress.message = message;
    progress.data = data.is_object() ? data : nlohmann::json::object();
    bus->publish(progress);
  }
};

ToolExecutorOptions workerExecutorOptions(const ToolWorkerOptions& o,
                                          std::shared_ptr<ThreadPool> pool,
                                          const std::shared_ptr<WorkerProgress>& progress) {
  ToolExecutorOptions options{o.maxConcurrent, std::move(pool), {}};
  options.progress = [progress](const ToolContext& call, const std::string& message,
                                const nlohmann::json& data) {
    progress->report(call, message, data);
  };
  return options;
}

}  // namespace

struct ToolWorker::Impl : std::enable_shared_from_this<ToolWorker::Impl> {
  Impl(EventBus& b, std::shared_ptr<ToolRegistry> tools, const ToolWorkerOptions& o)
      : bus(b),
        pool(o.pool ? o.pool : ThreadPool::shared()),
        progress(std::make_shared<WorkerProgress>()),
        executor(std::move(tools), workerExecutorOptions(o, pool, progress)) {
    progress->bus = &bus;
  }
  ~Impl() {
    std::lock_guard lock(progress->mutex);
    progress->bus = nullptr;
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  EventBus& bus;
  std::shared_ptr<ThreadPool> pool;
  std::shared_ptr<WorkerProgress> progress;
  ToolExecutor executor;
  std::mutex mutex;
  std::condition_variable idle;
  size_t inFlight = 0;

  void finished() {
    {
      std::lock_guard lock(mutex);
      --inFlight;
    }
    idle.notify_all();
  }

  void onRequest(const ToolExecutionRequest& request) {
    {
      std::lock_guard lock(mutex);
      ++inFlight;
    }
    try {
      pool->submit([self = shared_from_this(), request] {
        // The call's execute_tool span joins the trace the request was published under.
        ContextScope trace(TraceContext::parse(request.traceparent).value_or(TraceContext{}));
        // The executor's limits for this call: its timeout covers the whole call (every attempt),
        // so a call the executor has given up on is stopped here too, not left to run.
        ToolCallLimits limits;
        if (request.executionOptions.timeout.count() > 0) {
          limits.deadline = detail::deadlineAfter(std::chrono::steady_clock::now(),
                                                  request.executionOptions.timeout);
        }
        limits.retries = request.executionOptions.retries;
        limits.retryDelay = request.executionOptions.retryDelay;
        std::multimap<std::string, EventHeader>::iterator running;
        {
          std::lock_guard lock(self->progress->mutex);
          running = self->progress->calls.emplace(request.toolCall.id, request);
        }
        ToolResult r = self->executor.execute(request.toolCall, {}, limits);
        {
          std::lock_guard lock(self->progress->mutex);
          self->progress->calls.erase(running);
        }
        ToolExecutionCompleted done;
        done.workflowId = request.workflowId;
        done.threadId = request.threadId;
        done.traceId = request.traceId;
        done.toolCallId = request.toolCall.id;
        done.toolName = request.toolCall.name;
        done.result.success = r.success;
        done.result.result = r.result;
        done.result.error = r.error;
        done.result.executionTime = r.executionTime;
        done.result.retryCount = r.retryCount;
        done.result.timedOut = r.errorKind == ToolErrorKind::Timeout;
        done.spanId = request.spanId;
        done.traceparent = request.traceparent;
        self->bus.publish(done);
        self->finished();
      });
    } catch (...) {
      finished();
      ToolExecutionFailed failed;
      failed.workflowId = request.workflowId;
      failed.threadId = request.threadId;
      failed.traceId = request.traceId;
      failed.toolCallId = request.toolCall.id;
      failed.toolName = request.toolCall.name;
      failed.spanId = request.spanId;
      failed.traceparent = request.traceparent;
      failed.errorDetails = errorToJson(std::current_exception());
      failed.error = "no thread could be started to run the tool: " +
                     failed.errorDetails.value("message", std::string());
      bus.publish(failed);
    }
  }
};

ToolWorker::ToolWorker(EventBus& bus, std::shared_ptr<ToolRegistry> tools,
                       const ToolWorkerOptions& options) {
  if (!tools) throw ValidationError("tools", "must not be null");
  if (options.maxConcurrent < 1) {
    throw ValidationError("options.maxConcurrent", "must be at least 1");
  }
  impl_ = std::make_shared<Impl>(bus, std::move(tools), options);
  Impl* self = impl_.get();
  subscription_ = bus.subscribe<ToolExecutionRequest>(
      [self](const ToolExecutionRequest& e) { self->onRequest(e); });
}

ToolWorker::~ToolWorker() {
  subscription_.reset();
  std::unique_lock lock(impl_->mutex);
  impl_->idle.wait(lock, [&] { return impl_->inFlight == 0; });
}

}  // namespace parley
