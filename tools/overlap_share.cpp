// tools/overlap_share.cpp
#include "tools/overlap_share.hpp"

#include <algorithm>
#include <cstddef>

namespace moe::tools {

double hidden_share(const overlap_sample& s) noexcept {
  const double most = std::min(s.compute_s, s.comm_s);
  if (!(most > 0.0))
    return -1.0;
  return std::clamp((s.comm_s - s.exposed_s) / most, 0.0, 1.0);
}

neighbour_shares shares_against_neighbours(const std::vector<step_sample>& steps) {
  neighbour_shares out;
  std::vector<double> comm;
  for (size_t i = 1; i < steps.size(); ++i)
    if (steps[i].comm_s > 0.0)
      comm.push_back(steps[i].comm_s);
  if (comm.empty())
    return out;
  std::nth_element(comm.begin(), comm.begin() + static_cast<std::ptrdiff_t>(comm.size() / 2), comm.end());
  const double least = 0.5 * comm[comm.size() / 2];
  const size_t n = steps.size();
  for (size_t i = 1; i < n; ++i) {  // steps[0]: the run's first, no pair nor neighbour
    if (!(steps[i].comm_s > 0.0) || steps[i].comm_s < least)
      continue;
    double step_s = 0, wait_s = 0;
    int num_off = 0;
    bool on_beside = false;
    for (const size_t j : {i - 1, i + 1}) {
      if (j == 0 || j >= n)
        continue;
      if (steps[j].comm_s > 0.0) {
        on_beside = true;
        continue;
      }
      step_s += steps[j].step_s;
      wait_s += steps[j].wait_s;
      ++num_off;
    }
    if (on_beside || num_off == 0)
      continue;
    const step_sample& on = steps[i];
    out.hidden.push_back(
      hidden_share({.comm_s = on.comm_s, .compute_s = on.moe_s, .exposed_s = on.step_s - step_s / num_off}));
    out.by_waits.push_back(
      hidden_share({.comm_s = on.comm_s, .compute_s = on.moe_s, .exposed_s = on.wait_s - wait_s / num_off}));
  }
  return out;
}

}  // namespace moe::tools
