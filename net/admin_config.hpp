// net/admin_config.hpp
// Live configuration over the wire (admin connections only):
//   admin.config     []                        -> {target: {epoch, field: value, ...}, ...}
//   admin.configure  [ {target, field: value...} ] -> {target, epoch}
//   admin.drain      [ {role, rank} ]          -> {target, epoch}   (role: prefill | decode)
//   admin.undrain    [ {role, rank} ]          -> {target, epoch}
// Targets: prefill_balancer, decode_balancer, request_queue (their fields:
// actors/policy/live_config.hpp). The change goes to the cluster's supervisor, which has the
// target apply it whole or refuse it; a refusal is a 422 naming the field, a target being
// restarted a 503.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include <msgpack/object_fwd.hpp>

#include "actors/policy/live_config.hpp"
#include "net/connection_bridge.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

struct admin_configure_request {
  std::string target;
  config_fields change;
};

/// admin.configure's params: a known target and at most 32 fields, each a boolean, number,
/// string (at most 64 bytes) or list of at most 1024 integers.
[[nodiscard]] std::variant<admin_configure_request, rpc_error> parse_admin_configure(
  const msgpack::object& params);

/// admin.drain's (drain) or admin.undrain's params as the change of the role's balancer.
[[nodiscard]] std::variant<admin_configure_request, rpc_error> parse_admin_drain(
  const msgpack::object& params, bool drain);

/// Has the supervisor apply the change; replies {target, epoch}.
void spawn_admin_configure(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                           uint32_t msgid, admin_configure_request req, const reply_fn& reply);

/// Replies every target's configuration.
void spawn_admin_config(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                        const reply_fn& reply);

}  // namespace moe::net
