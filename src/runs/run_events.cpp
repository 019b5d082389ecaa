#include "runs/run_events.hpp"

#include <utility>

namespace parley::detail {

RunEvents::RunEvents(RunStore& runs, Lease lease, std::chrono::milliseconds chunkInterval,
                     std::size_t chunkBytes)
    : runs_(runs),
      lease_(std::move(lease)),
      chunkInterval_(chunkInterval),
      chunkBytes_(chunkBytes),
      lastChunkWrite_(std::chrono::steady_clock::now()) {}

void RunEvents::closeChunk() {
  if (text_.empty()) return;
  LlmStreamChunk chunk;
  chunk.content = std::move(text_);
  text_.clear();
  live_.push_back(eventInput(chunk));
}

void RunEvents::chunk(const std::string& text) {
  if (text.empty()) return;
  std::vector<EventInput> out;
  {
    std::lock_guard lock(mutex_);
    text_ += text;
    const auto now = std::chrono::steady_clock::now();
    if (text_.size() < chunkBytes_ && now - lastChunkWrite_ < chunkInterval_) return;
    closeChunk();
    lastChunkWrite_ = now;
    out.swap(live_);
  }
  runs_.appendEvents(lease_, out);
}

void RunEvents::add(EventInput event) {
  std::lock_guard lock(mutex_);
  closeChunk();  // the text streamed before the event comes before it
  live_.push_back(std::move(event));
}

void RunEvents::addToTurn(EventInput event) {
  std::lock_guard lock(mutex_);
  turn_.push_back(std::move(event));
}

void RunEvents::flush() {
  std::vector<EventInput> out;
  {
    std::lock_guard lock(mutex_);
    closeChunk();
    out.swap(live_);
  }
  if (!out.empty()) runs_.appendEvents(lease_, out);
}

std::vector<EventInput> RunEvents::takeForTurn() {
  std::lock_guard lock(mutex_);
  closeChunk();
  std::vector<EventInput> out;
  out.swap(live_);
  for (auto& e : turn_)
    out.push_back(std::move(e));
  turn_.clear();
  return out;
}

std::vector<EventInput> RunEvents::takeLive() {
  std::lock_guard lock(mutex_);
  closeChunk();
  turn_.clear();
  std::vector<EventInput> out;
  out.swap(live_);
  return out;
}

}  // namespace parley::detail
