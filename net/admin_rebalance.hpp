// net/admin_rebalance.hpp
// admin.rebalance [] or [{role}] (admin connections only): each EP group's expert balancer (or
// the one of `role`: prefill | decode) plans a placement from the window's routed load and
// installs it while serving (actors/expert_balancer.hpp). Replies
//   {epoch, moved_experts, moved_bytes, plain_moved_bytes, seconds,
//    groups: [{role, epoch, moved_experts, moved_bytes, plain_moved_bytes, seconds,
//              balancedness_before, balancedness_after, error}]}
// with the sums over the groups (epoch: the highest; seconds: the longest). A group whose
// rebalance failed keeps its placement and says why in `error`; when every group failed, the
// answer is a 503 naming the reasons (retry later: e.g. no load routed yet).
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <msgpack/object_fwd.hpp>

#include "net/connection_bridge.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

/// The groups asked: "prefill", "decode", or both for [].
[[nodiscard]] std::variant<std::vector<std::string>, rpc_error> parse_admin_rebalance(
  const msgpack::object& params);

/// Asks each group's expert balancer (found through the supervisor) and replies.
void spawn_admin_rebalance(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                           uint32_t msgid, const std::vector<std::string>& roles, const reply_fn& reply);

}  // namespace moe::net
