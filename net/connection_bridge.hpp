// net/connection_bridge.hpp
// One connection's actor in the CAF world: it prepares each generate (prompt -> token ids,
// context check), submits it to the request queue, turns the session's stream_chunks and
// session_result into wire bytes, cancels on request or disconnect, and quits once the
// connection has closed and every request it submitted has an id (and so was cancelled).
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <msgpack.hpp>

#include "net/generate_request.hpp"
#include "net/serving_target.hpp"

namespace moe::net {

/// Hands bytes to the connection (from CAF threads; the connection posts to its io thread).
/// `finished`: the msgid of the generate these bytes answer, once, with its final response.
using reply_fn = std::function<void(msgpack::sbuffer bytes, std::optional<uint32_t> finished)>;

struct bridge_config {
  std::shared_ptr<const serving_target> target;
  std::shared_ptr<server_counters> counters;
  reply_fn reply;
};

[[nodiscard]] caf::actor spawn_connection_bridge(caf::actor_system& sys, bridge_config cfg);

/// Starts a generate; `arrival` is when its last byte was read.
void bridge_generate(const caf::actor& bridge, uint32_t msgid, generate_request req,
                     std::chrono::steady_clock::time_point arrival);
/// Cancels the generate `msgid` of this connection (it answers with finish_reason "abort").
void bridge_cancel(const caf::actor& bridge, uint32_t msgid);
/// The connection closed: cancel everything, answer nothing more, quit when done.
void bridge_close(const caf::actor& bridge);

}  // namespace moe::net
