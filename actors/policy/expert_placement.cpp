// actors/policy/expert_placement.cpp
#include "actors/policy/expert_placement.hpp"

#include <algorithm>
#include <set>
#include <span>
#include <stdexcept>

#include "actors/policy/assignment.hpp"

namespace moe {

namespace {

int64_t per_rank(const std::vector<int32_t>& slots, int64_t num_ranks, const char* what) {
  if (num_ranks <= 0 || slots.empty() || static_cast<int64_t>(slots.size()) % num_ranks != 0)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(slots.size()) +
                                " slots do not split over " + std::to_string(num_ranks) + " ranks");
  return static_cast<int64_t>(slots.size()) / num_ranks;
}

std::set<int32_t> block_experts(const std::vector<int32_t>& slots, int64_t block, int64_t k) {
  return {slots.begin() + block * k, slots.begin() + (block + 1) * k};
}

}  // namespace

int64_t group_slots(int64_t num_logical, int64_t redundant, int64_t num_ranks) {
  if (num_logical <= 0 || redundant < 0 || num_ranks <= 0)
    throw std::invalid_argument("group_slots: needs experts and ranks");
  const int64_t at_least = num_logical + redundant;
  return (at_least + num_ranks - 1) / num_ranks * num_ranks;
}

int64_t replicas_moved(const std::vector<int32_t>& from, const std::vector<int32_t>& to, int64_t num_ranks) {
  const int64_t k_from = per_rank(from, num_ranks, "replicas_moved"),
                k_to = per_rank(to, num_ranks, "replicas_moved");
  int64_t moved = 0;
  for (int64_t r = 0; r < num_ranks; ++r) {
    const std::set<int32_t> had = block_experts(from, r, k_from);
    for (const int32_t e : block_experts(to, r, k_to))
      moved += had.count(e) == 0 ? 1 : 0;
  }
  return moved;
}

std::vector<int32_t> keep_in_place(const std::vector<int32_t>& from, std::vector<int32_t> to,
                                   int64_t num_ranks) {
  const int64_t k_from = per_rank(from, num_ranks, "keep_in_place"),
                k = per_rank(to, num_ranks, "keep_in_place");
  // overlap[b][r]: distinct experts of the plan's block b that rank r holds now
  std::vector<std::vector<int64_t>> overlap(num_ranks, std::vector<int64_t>(num_ranks, 0));
  for (int64_t r = 0; r < num_ranks; ++r) {
    const std::set<int32_t> had = block_experts(from, r, k_from);
    for (int64_t b = 0; b < num_ranks; ++b)
      for (const int32_t e : block_experts(to, b, k))
        overlap[b][r] += had.count(e);
  }
  const std::vector<int64_t> rank_of = best_assignment(overlap);  // the most replicas stay
  std::vector<int32_t> out(to.size(), -1);
  for (int64_t b = 0; b < num_ranks; ++b) {
    const int64_t r = rank_of[b];
    int32_t* dst = out.data() + r * k;
    std::vector<int32_t> rest;
    for (int64_t i = 0; i < k; ++i) {  // an expert the rank held stays at its old position if it can
      const int32_t e = to[b * k + i];
      int64_t at = -1;
      for (int64_t j = 0; j < std::min(k, k_from) && at < 0; ++j)
        if (from[r * k_from + j] == e && dst[j] < 0)
          at = j;
      if (at >= 0)
        dst[at] = e;
      else
        rest.push_back(e);
    }
    size_t next = 0;
    for (int64_t j = 0; j < k; ++j)
      if (dst[j] < 0)
        dst[j] = rest[next++];
  }
  return out;
}

std::vector<double> placement_balancedness(const std::vector<std::vector<int32_t>>& rows,
                                           const matrix<double>& load, int64_t num_ranks) {
  std::vector<double> out;
  for (size_t l = 0; l < rows.size() && static_cast<int64_t>(l) < load.rows; ++l) {
    const std::span<const double> row(load.data.data() + static_cast<int64_t>(l) * load.cols,
                                      static_cast<size_t>(load.cols));
    out.push_back(balancedness(tokens_per_rank(row, rows[l], num_ranks)));
  }
  return out;
}

placement_change_plan plan_placement(const matrix<double>& load,
                                     const std::vector<std::vector<int32_t>>& current, int64_t redundant,
                                     int64_t num_ranks, int64_t num_groups, int64_t num_nodes, bool global,
                                     bool minimal_movement) {
  if (static_cast<int64_t>(current.size()) != load.rows)
    throw std::invalid_argument("plan_placement: " + std::to_string(load.rows) + " layers of load for " +
                                std::to_string(current.size()) + " placed layers");
  const int64_t slots = group_slots(load.cols, redundant, num_ranks);
  const expert_plan plan = global ? rebalance_experts(load, slots, 1, 1, num_ranks)
                                  : rebalance_experts(load, slots, num_groups, num_nodes, num_ranks);
  placement_change_plan out;
  out.balancedness_before = placement_balancedness(current, load, num_ranks);
  const std::vector<double> planned = [&] {
    std::vector<std::vector<int32_t>> rows;
    for (int64_t l = 0; l < load.rows; ++l)
      rows.emplace_back(plan.phy2log.data.begin() + l * slots, plan.phy2log.data.begin() + (l + 1) * slots);
    return placement_balancedness(rows, load, num_ranks);
  }();
  for (int64_t l = 0; l < load.rows; ++l) {
    if (static_cast<int64_t>(current[l].size()) == slots && planned[l] < out.balancedness_before[l]) {
      out.slots.push_back(current[l]);  // EPLB's greedy plan is less even than what is in place
      continue;
    }
    std::vector<int32_t> to(plan.phy2log.data.begin() + l * slots,
                            plan.phy2log.data.begin() + (l + 1) * slots);
    out.moved_plain += replicas_moved(current[l], to, num_ranks);
    if (minimal_movement)
      to = keep_in_place(current[l], std::move(to), num_ranks);
    out.moved += replicas_moved(current[l], to, num_ranks);
    out.slots.push_back(std::move(to));
  }
  out.balancedness_after = placement_balancedness(out.slots, load, num_ranks);
  return out;
}

}  // namespace moe
