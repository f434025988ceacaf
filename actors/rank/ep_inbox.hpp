// actors/rank/ep_inbox.hpp
// A rank's receive side of the expert-parallel exchange: peers' dispatches and combines land
// here straight from the sender's stream (as DeepEP writes into a peer's receive buffer), each
// stamped with the time the link model says it arrives; the rank's stream waits here for a
// stage's inputs before it runs the stage. No actor sits between a payload and the stream that
// consumes it, so a message costs one thread wake-up, not three (clock thread, actor, stream).
// A peer's restart starts a new epoch of steps: the steps of the old one are abandoned here.
// CAF-free and thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/model/expert_parallel.hpp"

namespace moe {

enum class ep_payload : uint8_t { dispatch, combine };

/// What a pipeline stage waits for before it runs: `count` payloads of `kind` for `key` in the
/// rank's inbox, the last of them arrived.
struct stage_input {
  ep_payload kind = ep_payload::dispatch;
  ep_key key;
  int64_t count = 0;
};

class ep_inbox {
 public:
  using clock = std::chrono::steady_clock;

  /// Stores a payload that arrives at `at`. Returns true when its step has not begun on this
  /// rank (begin_step), so the sender must tell the rank's owner; false otherwise, and always
  /// once cancelled (the payload is dropped then).
  bool put(std::shared_ptr<const ep_dispatch> d, clock::time_point at);
  bool put(std::shared_ptr<const ep_combine> c, clock::time_point at);

  /// The owner is about to enqueue step `step`'s stages (steps begin in order).
  void begin_step(int64_t step);
  /// A payload of step `step` is here (a peer began it).
  [[nodiscard]] bool has_step(int64_t step) const;

  /// All of `in` is here, arrival times aside.
  [[nodiscard]] bool complete(const stage_input& in) const;
  /// Blocks until all of `in` is here and the latest of it has arrived (its link time passed).
  /// Throws std::runtime_error once cancelled.
  void wait(const stage_input& in);
  /// Takes `count` dispatches / combines of `key`, in source-rank order. Throws std::logic_error
  /// unless exactly that many are here.
  [[nodiscard]] std::vector<std::shared_ptr<const ep_dispatch>> take_dispatches(const ep_key& key,
                                                                                int64_t count);
  [[nodiscard]] std::vector<std::shared_ptr<const ep_combine>> take_combines(const ep_key& key,
                                                                             int64_t count);

  /// How long the stream has been blocked in wait() for payloads that are not all here (zero
  /// when it is not waiting, or waits only for a link time): a rank whose peer hangs is not
  /// itself stuck, and the watchdog spares it for a while (actors/policy/progress_watch.hpp).
  /// Thread-safe without the lock.
  [[nodiscard]] clock::duration waiting_for(clock::time_point now) const;

  /// Fault injection: blocks the calling stream, as a kernel that never returns would, until
  /// the rank stops (cancel). Not a wait for peers.
  void hang_until_cancelled();

  /// The rank is stopping: wakes every waiter (they throw), drops what is here and what comes.
  void cancel();
  [[nodiscard]] bool cancelled() const;

  /// The group changed (a peer was restarted) and numbers its steps from `first_step`: the
  /// steps below are abandoned. Their waiters wake and throw, their payloads (here or late)
  /// are dropped; steps from `first_step` on are kept.
  void start_epoch(int64_t first_step);
  /// `step` was abandoned by start_epoch.
  [[nodiscard]] bool abandoned(int64_t step) const { return step < floor_.load(std::memory_order_relaxed); }

 private:
  template <class Payload>
  struct slot {
    std::vector<std::shared_ptr<const Payload>> payloads;
    clock::time_point arrives = clock::time_point::min();  // the latest payload's arrival
  };
  template <class Payload>
  bool put_into(std::map<ep_key, slot<Payload>>& slots, std::shared_ptr<const Payload> p,
                clock::time_point at);
  template <class Payload>
  std::vector<std::shared_ptr<const Payload>> take_from(std::map<ep_key, slot<Payload>>& slots,
                                                        const ep_key& key, int64_t count, const char* what);
  [[nodiscard]] int64_t count_of(const stage_input& in, clock::time_point* arrives) const;

  /// How long before a payload's arrival wait() stops sleeping and spins.
  static constexpr std::chrono::microseconds spin_before_arrival{200};

  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<ep_key, slot<ep_dispatch>> dispatches_;
  std::map<ep_key, slot<ep_combine>> combines_;
  int64_t next_step_ = 0;               // steps below it have begun
  std::atomic<bool> cancelled_{false};  // set under mutex_; read also by the spin outside it
  std::atomic<int64_t> floor_{0};       // steps below it are abandoned; set under mutex_
  // when wait() began to block for missing payloads (clock ticks); min(): not blocked
  std::atomic<clock::rep> waiting_since_{std::numeric_limits<clock::rep>::min()};
};

}  // namespace moe
