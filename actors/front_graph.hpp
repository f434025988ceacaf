// actors/front_graph.hpp
// The front of a cluster: the request queue, the prefill balancer (with its sessions) and the
// decode balancer, wired to the ranks, and the supervisor's specs that restart them. The
// in-process cluster (actors/cluster.hpp) adds the specs of the ranks it spawned; the front node
// of a multi-process cluster (actors/front_cluster.hpp) those of the ranks other nodes run.
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/cluster.hpp"

namespace moe {

/// What the front's actors were spawned with, and what their restarts take again.
struct front_graph {
  decode_balancer_config decode_cfg;
  request_queue_config queue_cfg;
  prefill_balancer_graph prefill_graph;  // without handles: a restart gets the current ones
};

/// Spawns the decode balancer (and routes c's decode ranks to it), the prefill balancer over
/// c's ranks and the queue, into `c`. `ranks_restart`: prefill_balancer_graph's (false where
/// the ranks are other processes').
[[nodiscard]] front_graph spawn_front_graph(caf::actor_system& sys, cluster& c, const topology_config& topo,
                                            int64_t max_context, std::shared_ptr<const tokenizer> tok,
                                            bool ranks_restart = true);

/// The supervisor's specs of the queue and the balancers, first in start order; the ranks'
/// specs follow them (kinds "prefill_rank" and "decode_rank", which the balancers look up).
[[nodiscard]] std::vector<child_spec> front_child_specs(caf::actor_system& sys, const cluster& c,
                                                        const front_graph& front);

/// A prefill rank's new handle (restarted, or its node rejoined), told to the prefill balancer
/// (`current`: the supervisor's current handles).
void introduce_prefill_rank(const child_lookup& current, int64_t index, const caf::actor& rank);
/// A decode rank's new handle, told to the balancers, and the decode balancer to the rank.
void introduce_decode_rank(const child_lookup& current, int64_t index, const caf::actor& rank);

}  // namespace moe
