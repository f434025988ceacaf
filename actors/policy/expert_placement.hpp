// actors/policy/expert_placement.hpp
// From an EPLB plan to the placement a group installs: how many slots each rank holds, which
// replicas a new plan makes a rank copy in (what a rebalance moves), how to lay the plan's
// ranks over the current ones so that replicas already in place stay (minimal movement), and
// how even a placement spreads each layer's load. Pure functions over physical -> logical rows
// (layer_placement::slot_expert, EPLB's phy2log): slot p lives on rank p / slots_per_rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/policy/eplb.hpp"
#include "actors/policy/expert_load_window.hpp"

namespace moe {

/// The slots of a group: num_logical + at least `redundant`, rounded up so that each of
/// `num_ranks` ranks holds as many.
[[nodiscard]] int64_t group_slots(int64_t num_logical, int64_t redundant, int64_t num_ranks);

/// The replicas rank r must copy in to go from `from` to `to` (each a row over `num_ranks`
/// ranks), summed over the ranks: for each rank, the experts `to` gives it that `from` does not
/// (a second replica of an expert on the same rank is not copied again).
[[nodiscard]] int64_t replicas_moved(const std::vector<int32_t>& from, const std::vector<int32_t>& to,
                                     int64_t num_ranks);

/// `to` with its ranks' blocks of slots reordered over the ranks (a bijection: every rank still
/// gets one block, so the loads per rank are the same multiset) so that as many of the experts
/// each rank holds under `from` stay there: the most that any such reordering keeps
/// (best_assignment), so never fewer than `to` as laid out; among the best, a block stays on its
/// own rank. Within a rank, experts it already held keep their slot where they can.
[[nodiscard]] std::vector<int32_t> keep_in_place(const std::vector<int32_t>& from, std::vector<int32_t> to,
                                                 int64_t num_ranks);

/// The balancedness (expert_load_window.hpp's: mean / max tokens per rank) of each MoE layer's
/// row of `rows` under that layer's row of `load` [moe_layers, num_logical].
[[nodiscard]] std::vector<double> placement_balancedness(const std::vector<std::vector<int32_t>>& rows,
                                                         const matrix<double>& load, int64_t num_ranks);

/// A planned change of a group's placement, per MoE layer.
struct placement_change_plan {
  std::vector<std::vector<int32_t>> slots;  // [moe_layer] -> physical -> logical
  int64_t moved = 0;                        // replicas copied (after minimal movement, if asked)
  int64_t moved_plain = 0;                  // replicas the plan as EPLB laid it out would copy
  std::vector<double> balancedness_before;  // [moe_layer] under the current placement
  std::vector<double> balancedness_after;   // [moe_layer] under the new one
};

/// Plans the group's next placement from `load` [moe_layers, num_logical] (tokens routed per
/// expert) and the current rows `current` [moe_layer]: EPLB (rebalance_experts) over
/// group_slots(num_logical, redundant, num_ranks) slots, hierarchical over `num_groups` expert
/// groups and `num_nodes` nodes where they divide (else global), or global when `global`;
/// then keep_in_place when `minimal_movement`. A layer whose plan would spread the load less
/// evenly than its current row (EPLB is greedy) keeps that row: no layer gets less balanced. Throws std::invalid_argument for shapes that
/// do not fit, naming what.
[[nodiscard]] placement_change_plan plan_placement(const matrix<double>& load,
                                                   const std::vector<std::vector<int32_t>>& current,
                                                   int64_t redundant, int64_t num_ranks, int64_t num_groups,
                                                   int64_t num_nodes, bool global, bool minimal_movement);

}  // namespace moe
