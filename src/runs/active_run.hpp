// ActiveRun: one run a worker's slot works on, and what its heartbeat shares with it (the lease,
// the stop, the cancel request the renewal brought). With the two ways a durable turn ends
// early. Internal to src/runs/.
//
// Ownership: the worker keeps each ActiveRun in its list of active runs while a slot works on it.
// Thread-safety: the atomics are written by the heartbeat and read by the slot; `lease` and
// `next` belong to the slot.
#pragma once

#include <atomic>
#include <optional>
#include <stop_token>

#include "parley/errors.hpp"
#include "parley/run_store.hpp"

namespace parley::detail {

struct ActiveRun {
  Lease lease;
  std::stop_source stop;
  std::atomic<CancelRequest> request{CancelRequest::None};
  std::atomic<bool> lost{false};
  std::atomic<bool> handBack{false};
  // Set before the run's closing write (finish, wait, release): a renewal that then finds the
  // lease gone is not a loss.
  std::atomic<bool> closing{false};
  // The next run, claimed in this run's finish (finishWithTurnAndClaim): the slot goes on with it.
  std::optional<Claim> next;
};

// Ends a durable turn when a call makes the run wait (RunStore::wait was written).
struct RunWaits {};

// Ends a durable turn after a whole turn when the run was asked to stop there (an interrupt).
class StopAtSafePoint : public CancelledError {
 public:
  StopAtSafePoint() : CancelledError("interrupted after a whole turn") {}
};

}  // namespace parley::detail
