// actors/system_config.hpp
// The actor system settings every moeserve process (serve, generate, bench-cluster, tests)
// starts from.
#pragma once

#include <caf/fwd.hpp>

namespace moe {

/// Renders moe errors by name (add_serve_error_category) and tunes the scheduler for the rank
/// actors' short message hops: an idle CAF worker polls its queue without sleeping for a few
/// hundred attempts, then blocks until work is enqueued. CAF 0.17's default sleeps 50 us
/// between polls for ~25 ms before it blocks, so a message to a briefly idle actor could wait
/// that long, several times per MoE layer (dispatch, combine, stage completions). Measured on
/// the small preset, 2P+2D, 2 cores: 8 concurrent requests 74-91 -> 110-124 output tok/s,
/// TTFT at concurrency 1 354-366 -> 237-260 ms.
/// Also sets the calling thread's timer slack to 1 ns (inherited by the threads it starts): CAF's
/// clock thread delivers delayed messages, the link model's, on a timed wait that Linux may
/// otherwise end up to 50 us late. Measured, decode with the link model (64 requests, 2P+2D),
/// from a message's modelled arrival to the stage it unblocks: median 208-230 -> 170-180 us.
void configure_actor_system(caf::actor_system_config& cfg);

/// For a process of a multi-process cluster: loads CAF's middleman with heartbeats every
/// `heartbeat_s` and a connection silent for `timeout_s` closed (its actors down to their
/// monitors), and registers the message types that cross processes, under the same names in
/// every process (actors/messages.hpp, actors/node_gate.hpp).
void configure_remote(caf::actor_system_config& cfg, double heartbeat_s, double timeout_s);

}  // namespace moe
