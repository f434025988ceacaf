// actors/node_join.hpp
// Joining a node of a multi-process cluster: its gate (actors/node_gate.hpp) reached through
// CAF's middleman, the cluster's name and token presented, its roster handed back. Nodes start
// in any order: a node that does not listen yet is tried again until the deadline.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <string>

#include "actors/node_gate.hpp"
#include "config/cluster_file.hpp"

namespace moe {

/// Joins `node` as `who` presenting `cluster` and `token` (a peer's own, or a test's wrong
/// ones), for the front whose actor is `front` (null: a look, as cluster ping takes). Throws
/// input_error when the node refuses (another cluster, a wrong token, another front up: not
/// tried again) or does not answer before `deadline` (naming its address and CAF's last error).
[[nodiscard]] node_roster join_node(caf::actor_system& sys, const cluster_node& node,
                                    const std::string& cluster, const std::string& token,
                                    const std::string& who, const caf::actor& front,
                                    std::chrono::steady_clock::time_point deadline);

}  // namespace moe
