// actors/node_watch.hpp
// The front node's watch over the other nodes of a multi-process cluster: it monitors their
// ranks. When a node's ranks go down (killed, or silent past the heartbeat timeout), a group
// split over nodes goes on with its survivors alone (elastic EP: a membership of a new epoch
// without the lost ranks; the survivors hold every expert between them, copying the missing
// ones from their checkpoint), the balancers give the lost ranks no work, and the sessions of
// the lost ranks' requests place them again (re-prefilled on the ranks still up). The node is
// joined again through its gate every half second. Once it answers (restarted, or woken from a
// SIGSTOP), its ranks replace the lost ones as the supervisor's children, the balancers learn
// them as they learn a restarted rank (its group's expert balancer too), and the split
// group starts a new epoch with all of them and the placement its expert balancer decided last
// (the one it began with, if none); a group the node hosts whole starts again from its first
// placement, its decisions kept by the node's new keeper. Only a role with no rank left up (every prefill rank lost,
// say) answers requests with a retryable 503 until its node returns.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <string>
#include <vector>

#include "actors/node_gate.hpp"
#include "config/cluster_file.hpp"

namespace moe {

struct front_placements;  // actors/front_cluster.hpp

struct node_watch_config {
  cluster_file file;                 // the nodes' addresses, the cluster's name and token
  std::string self_name;             // the front node's name, presented to the gates
  caf::actor supervisor;             // the front's: the ranks are its `elsewhere` children
  std::vector<node_roster> rosters;  // as the nodes first answered
  // the split groups' expert balancers' decisions, which a whole group's membership carries, and
  // the keepers of the groups one node hosts whole; a (peers_atom) message renews the
  // memberships (keep_front_placements asks so)
  std::shared_ptr<front_placements> kept;
  caf::actor front;         // this front's actor as the nodes know it (join_node); stopped with the watch
  int64_t first_epoch = 0;  // of the split groups' memberships the front gave first (first_front_epoch)
};

/// Spawns the watch (a detached actor: joining blocks); it stops with an exit message.
[[nodiscard]] caf::actor spawn_node_watch(caf::actor_system& sys, node_watch_config cfg);

}  // namespace moe
