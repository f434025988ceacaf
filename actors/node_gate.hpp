// actors/node_gate.hpp
// The one actor a node of a multi-process cluster publishes on its control port (CAF's
// middleman): a peer that presents the cluster's name and token gets the node's ranks; any other
// is refused and logged. So nothing but the gate is reachable without the token (../shared/
// TOOLCHAIN.md §3: publish / remote_actor, heartbeats, down_msg on a lost node).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/atoms.hpp"

namespace moe {

/// What a node hosts, as the gate hands it to a peer that presented the token.
struct node_roster {
  std::string node;
  int64_t first_prefill_rank = 0;  // global index (within its role) of prefill_ranks[0]
  std::vector<caf::actor> prefill_ranks;
  int64_t first_decode_rank = 0;
  std::vector<caf::actor> decode_ranks;
  std::string data_address;  // its data plane's (actors/rank/data_plane.hpp); empty: payloads as messages
  int64_t expert_bytes = 0;  // one routed expert's weights as its ranks hold them (what a move copies)
  // keeps the expert balancers' decisions for the groups this node hosts whole (their memberships
  // are its own: actors/node_ranks.hpp); a supervisor's placement_keeper_actor; null: none
  caf::actor keeper;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_roster& x) {
  return f(caf::meta::type_name("node_roster"), x.node, x.first_prefill_rank, x.prefill_ranks,
           x.first_decode_rank, x.decode_ranks, x.data_address, x.expert_bytes, x.keeper);
}

/// (join_atom, cluster name, token, the asking node's name, the asking front) -> the roster, or
/// an error naming what was wrong (another cluster, a wrong token, another front that is up),
/// also logged on this node's stderr. The front is an actor of the front's process that lives as
/// long as it serves: the gate serves one front at a time and refuses a second while the first
/// is up (it lets go of a front it sees go down: stopped, killed, or silent past the connection
/// timeout). A null front is a look (cluster ping), which any front allows.
using node_gate_actor = caf::typed_actor<
  caf::replies_to<join_atom, std::string, std::string, std::string, caf::actor>::with<node_roster>>;

/// Another node that runs ranks, as the cluster file gives its control port.
struct node_address {
  std::string host;
  uint16_t port = 0;
};

/// The gate of a node hosting `roster`. Before it hands the roster to the front, it connects
/// this node to each of `peers` that answers within half a second (CAF's middleman, one
/// connection per pair of nodes; a node reaches a peer's gate without the token, as anyone
/// may): the ranks of the two nodes then message each other directly, not through the front.
/// Without it, a peer's messages go through the front, and after a node that was stopped and
/// continued rejoins, its first messages to a peer are dropped until that peer's first message
/// reaches it (CAF 0.17 keeps its proxies of a third node, but not its route to them).
[[nodiscard]] node_gate_actor spawn_node_gate(caf::actor_system& sys, node_roster roster, std::string cluster,
                                              std::string token, std::vector<node_address> peers = {});

/// Compares in time that does not depend on where the two differ (only on their lengths).
[[nodiscard]] bool same_secret(const std::string& a, const std::string& b) noexcept;

}  // namespace moe
