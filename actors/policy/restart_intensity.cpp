// actors/policy/restart_intensity.cpp
#include "actors/policy/restart_intensity.hpp"

#include <stdexcept>

namespace moe {

restart_intensity::restart_intensity(restart_limits limits) : limits_(limits) {
  if (limits_.max_restarts < 0 || limits_.period.count() <= 0)
    throw std::logic_error("restart_intensity: max_restarts >= 0 and period > 0 expected");
}

void restart_intensity::forget_before(clock::time_point now) {
  // a restart exactly `period` ago has left the window
  while (!recent_.empty() && now - recent_.front() >= limits_.period)
    recent_.pop_front();
}

bool restart_intensity::allow(clock::time_point now) {
  forget_before(now);
  if (static_cast<int64_t>(recent_.size()) >= limits_.max_restarts)
    return false;
  recent_.push_back(now);
  ++total_;
  return true;
}

int64_t restart_intensity::recent(clock::time_point now) {
  forget_before(now);
  return static_cast<int64_t>(recent_.size());
}

}  // namespace moe
