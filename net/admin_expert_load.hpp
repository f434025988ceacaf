// net/admin_expert_load.hpp
// admin.expert_load [] (admin connections only): the tokens each EP group's gates routed to each
// logical expert of each MoE layer over the ranks' windows, summed over the group's ranks:
//   {window_steps, load: [layer][expert] (both groups),
//    prefill: {ranks, steps, load}, decode: {ranks, steps, load}}
// `ranks` counts the ranks that answered (one being restarted is left out) and `steps` the
// fewest steps one of them covers. `load` is what `moeserve eplb-plan --load` reads.
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <memory>

#include "net/connection_bridge.hpp"

namespace moe::net {

/// Asks every rank through the supervisor and replies the sums.
void spawn_admin_expert_load(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                             uint32_t msgid, const reply_fn& reply);

}  // namespace moe::net
