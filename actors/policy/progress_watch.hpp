// actors/policy/progress_watch.hpp
// Whether a rank that is alive is stuck: it has work (running requests, or a step in flight) and
// its step count has not moved, or it has not answered at all, for `stall_timeout`. An idle rank
// is never stuck. A rank blocked inside a step on its peers' payloads is spared while that wait
// is shorter than twice the timeout: the peer that hangs is the stuck one, is killed within one
// timeout, and its restart ends the wait (the group abandons the step); a wait that long means
// no peer will end it (a lost payload), and the waiter is stuck as well.
// Pure: the caller passes each sample and the time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace moe {

/// What a rank reports (rank_stats' fields that tell progress).
struct progress_sample {
  int64_t num_running = 0;
  int64_t num_steps = 0;
  bool step_in_flight = false;
  int64_t peer_wait_ms = 0;  // blocked on peers for this long; 0: not
};

class progress_watch {
 public:
  using clock = std::chrono::steady_clock;

  progress_watch(std::chrono::milliseconds stall_timeout, clock::time_point now);

  /// One sample at `now` (none: the rank did not answer); true when it has made no progress
  /// for the whole timeout while it had work.
  [[nodiscard]] bool stalled(std::optional<progress_sample> sample, clock::time_point now);
  /// The longest wait on peers that is spared.
  [[nodiscard]] std::chrono::milliseconds peer_wait_limit() const noexcept { return 2 * timeout_; }

  /// A new instance of the rank (restarted): it starts afresh at `now`.
  void reset(clock::time_point now);

 private:
  std::chrono::milliseconds timeout_;
  clock::time_point last_progress_;
  std::optional<int64_t> last_steps_;
};

}  // namespace moe
