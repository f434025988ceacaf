// actors/rank/rank_timings.cpp
#include "actors/rank/rank_timings.hpp"

#include <algorithm>
#include <cmath>

namespace moe {

void rank_timings::add(timed_part part, int64_t nanoseconds) noexcept {
  part_ns_[static_cast<size_t>(part)].fetch_add(nanoseconds, std::memory_order_relaxed);
}

void rank_timings::add_kv_transfer(double seconds) noexcept {
  if (!std::isfinite(seconds))
    return;
  seconds = std::max(seconds, 0.0);  // clocks of two hosts may disagree by a little
  const auto bucket =
    static_cast<size_t>(std::lower_bound(kv_transfer_bounds.begin(), kv_transfer_bounds.end(), seconds) -
                        kv_transfer_bounds.begin());
  kv_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  kv_ns_.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

std::vector<double> rank_timings::part_seconds() const {
  std::vector<double> out;
  for (const auto& ns : part_ns_)
    out.push_back(static_cast<double>(ns.load(std::memory_order_relaxed)) * 1e-9);
  return out;
}

std::vector<int64_t> rank_timings::kv_transfer_counts() const {
  std::vector<int64_t> out;
  for (const auto& n : kv_counts_)
    out.push_back(n.load(std::memory_order_relaxed));
  return out;
}

double rank_timings::kv_transfer_seconds() const noexcept {
  return static_cast<double>(kv_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

}  // namespace moe
