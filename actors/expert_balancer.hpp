// actors/expert_balancer.hpp
// The expert-parallel load balancer (EPLB) of one EP group: it collects the tokens each rank's
// gate routed to each expert, plans a new placement of the expert replicas
// (actors/policy/expert_placement.hpp over DeepSeek's rebalance_experts) every interval_steps
// steps of the group or when asked, and installs it while the group serves. First every rank
// copies the experts the plan gives it and it lacks from peers that hold them, layer by layer,
// as messages (actors/rank/expert_fetch.hpp), while steps go on; then two phases:
//   1. prepare: every rank checks the placement fits and answers the step it begins next; it
//      begins no step past that + placement_hold_steps until the outcome;
//   2. the decision is recorded with the supervisor (which hands it to restarted ranks), then
//      commit: every rank uses the new placement from one switch step on (the highest answer +
//      placement_hold_steps), so no step runs with two placements; each answers once it began
//      that step (an idle group runs empty steps to it), so a rebalance ends with the
//      placement in force.
// A prepare that fails or times out aborts the change and leaves the old placement (logged,
// counted, tried again at the next interval). A commit refused after the decision was recorded
// (a rank restarted meanwhile, or gave up waiting) renews the group's membership, which carries
// the recorded placement: every rank takes it from the new membership's first step.
// It keeps no state a restart loses: the placement in force is asked of the ranks.
// Its settings (policy, interval_steps, window_steps, redundant_experts, minimal_movement)
// change live (actors/live_settings.hpp, target "expert_balancer").
#pragma once

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/live_settings.hpp"
#include "actors/messages.hpp"

namespace moe {

using expert_balancer_actor = caf::typed_actor<
  // Plans from the window's routed load and installs the placement now, whatever the policy
  // ("off" plans hierarchically): what it did, or in `error` why the old placement stays. A
  // rebalance asked while one runs gets that one's report.
  caf::replies_to<rebalance_atom>::with<rebalance_report>,
  // Rank `index` of the group was restarted: its new handle.
  caf::reacts_to<peers_atom, int64_t, caf::actor>,
  // Its counters and the current placement's balancedness per MoE layer.
  caf::replies_to<stats_atom>::with<expert_balancer_stats>,
  // The periodic check (internal): rebalances once interval_steps steps have run.
  caf::reacts_to<check_atom>, configure_change, configure_restore, config_query>;

struct expert_balancer_config {
  std::string role;          // "prefill" | "decode": the group
  std::string rank_kind;     // its ranks' kind with the supervisor: "prefill_rank" | "decode_rank"
  caf::actor supervisor;     // keeps the decisions (supervisor_actor's placement_atom message)
  int64_t num_ranks = 1;     // the group's
  int64_t num_logical = 0;   // routed experts
  int64_t num_groups = 1;    // the model's expert groups (n_group)
  int64_t num_nodes = 1;     // nodes the group's ranks span
  int64_t expert_bytes = 0;  // one routed expert's weights
  expert_balancer_settings settings;
  std::chrono::milliseconds check_period{1000};     // how often it looks at the group's steps
  std::chrono::milliseconds rank_timeout{5000};     // for the answers to questions and phase one
  std::chrono::milliseconds switch_timeout{30000};  // for every rank to begin the switch step
  std::chrono::milliseconds move_timeout{120000};   // for every rank to copy the experts it lacks
};

[[nodiscard]] expert_balancer_actor spawn_expert_balancer(caf::actor_system& sys,
                                                          std::vector<caf::actor> ranks,
                                                          expert_balancer_config cfg);

}  // namespace moe
