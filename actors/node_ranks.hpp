// actors/node_ranks.hpp
// The ranks one node of a multi-process cluster runs (config/cluster.toml): its slice of the
// prefill and decode groups, each rank numbered within its group as the whole cluster numbers
// them, spawned on this process's actor system and listed in the roster its gate hands out.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "actors/node_gate.hpp"
#include "actors/rank/data_plane.hpp"
#include "actors/rank/nccl_transport.hpp"
#include "actors/rank/rank_model.hpp"
#include "config/cluster_file.hpp"
#include "kernels/model/weights.hpp"

namespace moe {

struct group_roster;

struct node_ranks {
  node_roster roster;
  caf::actor copy_engine;             // the node's expert copies (actors/rank/copy_engine.hpp)
  std::shared_ptr<data_plane> plane;  // its peers' payloads to these ranks (null: as messages)
  // data_plane = "nccl": the ranks' payloads to and from other processes, over NCCL (null: not)
  std::shared_ptr<collective_transport> collective;
  // the memberships of the groups this node hosts whole (null: none, or a group across nodes)
  std::shared_ptr<group_roster> prefill_group, decode_group;

  /// Stops the ranks, the copy engine and the roster's keeper.
  void stop() const;
};

/// A rank's model settings under `topo` with `threads` threads (spawn_cluster's and a node's).
[[nodiscard]] rank_model_config rank_config_of(const topology_config& topo, bool reference, int64_t threads);

/// Spawns node `node`'s ranks of cluster `c` over `weights` (validate_cluster_for_model
/// passed). Their threads: --threads-per-rank, or (auto) this process's cores split among its
/// own ranks. A group the node hosts whole is introduced (its members share this process's
/// inboxes), and an expert balancer's decisions for it (run on the front) are kept here, in its
/// membership (roster.keeper). Throws input_error when their KV pools do not fit in memory.
[[nodiscard]] node_ranks spawn_node_ranks(caf::actor_system& sys,
                                          std::shared_ptr<const model_weights> weights, const cluster_file& c,
                                          const cluster_node& node, bool reference);

}  // namespace moe
