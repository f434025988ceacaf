// actors/policy/progress_watch.cpp
#include "actors/policy/progress_watch.hpp"

namespace moe {

progress_watch::progress_watch(std::chrono::milliseconds stall_timeout, clock::time_point now)
    : timeout_(stall_timeout), last_progress_(now) {}

bool progress_watch::stalled(std::optional<progress_sample> sample, clock::time_point now) {
  if (sample) {
    const bool moved = !last_steps_ || sample->num_steps != *last_steps_;
    const bool has_work = sample->num_running > 0 || sample->step_in_flight;
    const bool waited_too_long = sample->peer_wait_ms >= peer_wait_limit().count();
    const bool spared = sample->peer_wait_ms > 0 && !waited_too_long;
    if (moved || !has_work || spared)
      last_progress_ = now;
    last_steps_ = sample->num_steps;
    if (waited_too_long)
      return true;
  }
  return now - last_progress_ >= timeout_;
}

void progress_watch::reset(clock::time_point now) {
  last_progress_ = now;
  last_steps_.reset();
}

}  // namespace moe
