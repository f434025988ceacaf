// actors/front_cluster.hpp
// The front node of a multi-process cluster (config/cluster.toml): the request queue, the
// balancers and the sessions run here, over ranks that other nodes run and listed in the rosters
// their gates handed out (actors/node_gate.hpp). The supervisor here watches those ranks and
// lists them (admin.actors, stats), but their own nodes run them (restart_policy::elsewhere):
// a rank that is lost is reported and left out until its node answers again (actors/node_watch.hpp
// shrinks its split group to the survivors, joins the node again and puts its ranks in the lost
// ones' places). An expert-parallel
// group split over nodes is introduced from here (its ranks send each other their dispatches and
// combines over the data plane). Every group's expert balancer runs here: a split group's
// decisions are kept here, those of a group one node hosts whole on that node, in its membership.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/cluster.hpp"
#include "actors/node_gate.hpp"
#include "config/model_config.hpp"

namespace moe {

/// What the expert balancers of the groups split over nodes decided, kept on the front for the
/// memberships it gives those groups (introduce_split_groups): the whole group's, at a rejoin
/// too, carries the placement in force; the survivors of a lost node take one over themselves.
/// A group one node hosts whole has its decisions kept by that node (node_roster::keeper).
/// The front's supervisor keeps the decisions here (keep_front_placements) on its thread, the
/// node watch introduces the groups and notes the keepers on its own: hence the mutex.
struct front_placements {
  struct group {
    int64_t first_step = 0;  // of the membership the front gave the group last
    bool whole = true;       // every rank of the group was in it
    std::shared_ptr<const std::vector<layer_placement>> placements;  // null: the group's first
    uint64_t epoch = 0;
    bool split = false;                  // its ranks are on more than one node
    placement_keeper_actor node_keeper;  // not split: its node's keeper, as it last joined
  };
  std::mutex mutex;
  group prefill, decode;
  caf::actor watch;  // the node watch: renews the memberships ((peers_atom) to it); set once it runs
};

/// The front supervisor's placement keeper (supervisor.hpp) for the groups' expert balancers:
/// for a split group, a decision planned for the membership in force of a whole group is kept
/// (false for any other); with `renew` it is kept whatever the membership and the node watch
/// gives the group a new membership that carries it. A group one node hosts whole: that node's
/// keeper (null, hence not kept, before the node joined).
[[nodiscard]] placement_keeper keep_front_placements(std::shared_ptr<front_placements> kept);

/// Notes in `kept` which groups are split over the rosters' nodes and, for a group one node
/// hosts whole, that node's keeper (at start, and when the node joins again).
void note_group_keepers(const std::vector<node_roster>& rosters, front_placements& kept);

/// The front's cluster over the rosters' ranks: every prefill rank 0 .. P-1 and decode rank
/// 0 .. D-1 of `topo` exactly once among them, or an input_error naming what is missing or
/// listed twice. Each group gets an expert balancer here (EPLB: a split group's decisions kept
/// in `kept`, a whole group's by its node).
/// The split groups' first memberships are of epoch `first_epoch` (first_front_epoch).
[[nodiscard]] cluster spawn_front_cluster(caf::actor_system& sys, const model_config& model,
                                          std::shared_ptr<const tokenizer> tok, const topology_config& topo,
                                          const std::vector<node_roster>& rosters,
                                          std::shared_ptr<front_placements> kept, int64_t first_epoch = 0);

/// The epoch this front's memberships of the split groups start at: above every membership their
/// ranks hold already (0 for fresh ranks). A front started again while the nodes run finds them
/// in an earlier front's memberships, whose later epochs a rank would take a new one below for
/// stale (ep_inbox::start_epoch): it would go on waiting for a lost peer in an old step. A rank
/// that does not answer within `timeout` is left out (its node is being lost).
[[nodiscard]] int64_t first_front_epoch(caf::actor_system& sys, const std::vector<node_roster>& rosters,
                                        std::chrono::milliseconds timeout);

/// The prefill ranks (`prefill`) or decode ranks of the rosters in group order; input_error when
/// a rank of 0 .. count-1 is missing or listed twice. Pure.
[[nodiscard]] std::vector<caf::actor> ranks_in_order(const std::vector<node_roster>& rosters, bool prefill,
                                                     int64_t count);

/// Whether the group's ranks are on more than one node (the front introduces such a group, its
/// members exchanging payloads as messages; a node introduces a group it hosts whole). Pure.
[[nodiscard]] bool split_over_nodes(const std::vector<node_roster>& rosters, bool prefill);

/// A group's ranks on the nodes still up: the group indices (ascending) and their ranks.
struct group_alive {
  std::vector<int64_t> indices;
  std::vector<caf::actor> ranks;
  std::vector<std::string> data_addresses;  // each rank's node's data plane (empty: none)
};

/// The prefill (`prefill`) or decode ranks of the rosters not in `lost` (roster indices), in
/// group order: after a node is lost, the survivors of a group split over nodes go on alone
/// (elastic EP: they hold every expert between them, ep_rank_core::set_membership). Pure.
[[nodiscard]] group_alive ranks_alive(const std::vector<node_roster>& rosters, bool prefill,
                                      const std::vector<bool>& lost);

/// Introduces each group split over nodes to its ranks on the nodes not `lost`, as a
/// membership from `first_step` (global ranks: prefill ranks from 0, decode ranks from
/// `num_prefill_ranks`); a group with no rank up waits for its nodes. At start nothing is lost;
/// after a node is lost its groups' survivors go on alone, and when it rejoins the whole groups,
/// with the placement `kept` holds for them (when given); the memberships are noted there.
void introduce_split_groups(const std::vector<node_roster>& rosters, const std::vector<bool>& lost,
                            int64_t num_prefill_ranks, int64_t first_step, front_placements* kept = nullptr);

}  // namespace moe
