// actors/policy/restart_intensity.hpp
// OTP's restart intensity for one supervised child: at most `max_restarts` restarts within any
// `period`; one more means the child is crash-looping and its supervisor escalates (stops the
// cluster with the reason) instead of restarting it again. Pure: the caller passes the time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

namespace moe {

struct restart_limits {
  int64_t max_restarts = 5;                // within any `period`
  std::chrono::milliseconds period{2000};  // kills once a second stay within; a crash loop does not
};

class restart_intensity {
 public:
  using clock = std::chrono::steady_clock;

  explicit restart_intensity(restart_limits limits = {});

  /// The child died at `now`: true if restarting it keeps within the limits (the restart is
  /// counted), false if it is one restart too many (nothing is counted; escalate).
  [[nodiscard]] bool allow(clock::time_point now);

  /// Restarts counted since construction.
  [[nodiscard]] int64_t num_restarts() const noexcept { return total_; }

  /// Restarts within the period that ends at `now`.
  [[nodiscard]] int64_t recent(clock::time_point now);

 private:
  void forget_before(clock::time_point now);

  restart_limits limits_;
  std::deque<clock::time_point> recent_;  // restart times within the period, oldest first
  int64_t total_ = 0;
};

}  // namespace moe
