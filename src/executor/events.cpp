#include "parley/events.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <iostream>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "parley/logger.hpp"

namespace parley {
namespace detail {

struct EventHandlerEntry {
  uint64_t id = 0;
  std::type_index type;
  std::function<void(const void*)> handler;
  std::mutex mutex;
  std::condition_variable idle;
  int inFlight = 0;  // calls running now, on any thread
  bool removed = false;

  EventHandlerEntry(uint64_t i, std::type_index t, std::function<void(const void*)> h)
      : id(i), type(t), handler(std::move(h)) {}
};

struct EventBusState {
  std::function<void(const std::string&)> log;
  mutable std::mutex mutex;
  uint64_t nextId = 1;
  std::unordered_map<std::type_index, std::vector<std::shared_ptr<EventHandlerEntry>>> handlers;
  std::unordered_map<uint64_t, std::shared_ptr<EventHandlerEntry>> byId;

  void unsubscribe(uint64_t id);
};

namespace {
// The handlers this thread is inside of, innermost last: a handler unsubscribing itself must
// not wait for its own call to return.
thread_local std::vector<const EventHandlerEntry*> tCallStack;
}  // namespace

void EventBusState::unsubscribe(uint64_t id) {
  std::shared_ptr<EventHandlerEntry> entry;
  {
    std::lock_guard lock(mutex);
    auto it = byId.find(id);
    if (it == byId.end()) return;
    entry = it->second;
    byId.erase(it);
    auto& list = handlers[entry->type];
    list.erase(std::remove(list.begin(), list.end(), entry), list.end());
  }
  const auto own = std::count(tCallStack.begin(), tCallStack.end(), entry.get());
  std::unique_lock lock(entry->mutex);
  entry->removed = true;
  entry->idle.wait(lock, [&] { return entry->inFlight <= own; });
}

}  // namespace detail

Subscription::~Subscription() {
  reset();
}

Subscription::Subscription(Subscription&& other) noexcept
    : bus_(std::move(other.bus_)), id_(std::exchange(other.id_, 0)) {}

Subscription& Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    reset();
    bus_ = std::move(other.bus_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void Subscription::reset() {
  const uint64_t id = std::exchange(id_, 0);
  if (id == 0) return;
  if (auto bus = bus_.lock()) bus->unsubscribe(id);
  bus_.reset();
}

EventBus::EventBus(std::function<void(const std::string&)> log)
    : state_(std::make_shared<detail::EventBusState>()) {
  state_->log = std::move(log);
}

EventBus::~EventBus() = default;

Subscription EventBus::subscribeRaw(std::type_index type,
                                    std::function<void(const void*)> handler) {
  std::lock_guard lock(state_->mutex);
  const uint64_t id = state_->nextId++;
  auto entry = std::make_shared<detail::EventHandlerEntry>(id, type, std::move(handler));
  state_->handlers[type].push_back(entry);
  state_->byId.emplace(id, std::move(entry));
  return Subscription(state_, id);
}

void EventBus::publishRaw(std::type_index type, const void* event, const std::string& typeName) {
  std::vector<std::shared_ptr<detail::EventHandlerEntry>> handlers;
  {
    std::lock_guard lock(state_->mutex);
    auto it = state_->handlers.find(type);
    if (it == state_->handlers.end()) return;
    handlers = it->second;  // handlers run without the lock: they may (un)subscribe, publish
  }
  for (const auto& entry : handlers) {
    {
      std::lock_guard lock(entry->mutex);
      if (entry->removed) continue;
      ++entry->inFlight;
    }
    detail::tCallStack.push_back(entry.get());
    std::string failure;
    try {
      entry->handler(event);
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown exception";
    }
    detail::tCallStack.pop_back();
    {
      std::lock_guard lock(entry->mutex);
      --entry->inFlight;
    }
    entry->idle.notify_all();
    if (!failure.empty()) {
      const std::string line = "parley: event handler for " + typeName + " threw: " + failure;
      writeLog(state_->log, line);
    }
  }
}

size_t EventBus::subscriberCountRaw(std::type_index type) const {
  std::lock_guard lock(state_->mutex);
  auto it = state_->handlers.find(type);
  return it == state_->handlers.end() ? 0 : it->second.size();
}

}  // namespace parley
