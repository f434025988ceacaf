// actors/policy/progress_watch.cpp
#include "actors/policy/progress_watch.hpp"

namespace moe {

progress_watch::progress_watch(std::chrono::milliseconds stall_timeout, clock::time_point now)
    : timeout_(stall_timeout), last_progress_(now) {}

bool progress_watch::stalled(std::optional<progress_sample> sample, clock::time_point now) {
  if (sample) {
    const bool moved = !last_steps_ || sample->num_steps != *last_steps_;
    if (moved || sample->num_running == 0)
      last_progress_ = now;
    last_steps_ = sample->num_steps;
  }
  return now - last_progress_ >= timeout_;
}

void progress_watch::reset(clock::time_point now) {
  last_progress_ = now;
  last_steps_.reset();
}

}  // namespace moe
