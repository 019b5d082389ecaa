// The EventBus that carries the events of the event-driven executor (event_types.hpp).
//
// Every event carries type (eventName() of the struct's kEventType, e.g.
// "llm_execution_request"), timestamp, workflowId, threadId and traceId. Events are plain values.
//
// EventBus: subscribe<E>(handler) registers a handler for events of type E and returns a
// Subscription that unregisters it when destroyed (or reset()); publish(event) calls the
// handlers of E synchronously, on the publishing thread, in the order they subscribed.
//
// Ownership: the caller owns the bus; a Subscription may outlive its bus (it then does nothing).
// Thread-safety: every member may be called from any thread at any time, also from inside a
// handler (publishing another event, subscribing, unsubscribing itself or another handler).
// Unsubscribing waits for calls of that handler running on other threads to return, so once
// reset() returns the handler is not running and will not run again (except when a handler
// unsubscribes itself: that call cannot wait for itself and returns at once). A handler that
// throws is logged and the other handlers still run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <vector>

#include <nlohmann/json.hpp>

#include "parley/event_types.hpp"

namespace parley {

// --- the bus -----------------------------------------------------------------------------------

namespace detail {
struct EventBusState;
}

// Unregisters its handler when destroyed. Move-only; a default-constructed one holds nothing.
class Subscription {
 public:
  Subscription() = default;
  ~Subscription();
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // Unregisters now (see the header comment for when it waits). Idempotent.
  void reset();
  bool active() const noexcept { return id_ != 0; }

 private:
  friend class EventBus;
  Subscription(std::weak_ptr<detail::EventBusState> bus, uint64_t id)
      : bus_(std::move(bus)), id_(id) {}
  std::weak_ptr<detail::EventBusState> bus_;
  uint64_t id_ = 0;
};

class EventBus {
 public:
  // `log` receives handler failures; null: stderr.
  explicit EventBus(std::function<void(const std::string&)> log = {});
  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  template <typename Event>
  [[nodiscard]] Subscription subscribe(std::function<void(const Event&)> handler) {
    return subscribeRaw(
        std::type_index(typeid(Event)),
        [h = std::move(handler)](const void* event) { h(*static_cast<const Event*>(event)); });
  }

  template <typename Event>
  void publish(const Event& event) {
    publishRaw(std::type_index(typeid(Event)), &event, event.type);
  }

  // Handlers registered for `Event` now.
  template <typename Event>
  size_t subscriberCount() const {
    return subscriberCountRaw(std::type_index(typeid(Event)));
  }

 private:
  Subscription subscribeRaw(std::type_index type, std::function<void(const void*)> handler);
  void publishRaw(std::type_index type, const void* event, const std::string& typeName);
  size_t subscriberCountRaw(std::type_index type) const;
  std::shared_ptr<detail::EventBusState> state_;
};

}  // namespace parley
