// net/server_probes.hpp
// The answers of the methods about the server itself: models and health at once; stats and
// ready from a one-shot actor that asks the cluster (stats: the queue and every rank; ready: a
// real 1-token generation through the whole path).
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "actors/cluster.hpp"
#include "actors/messages.hpp"
#include "net/connection_bridge.hpp"

namespace moe::net {

/// [{id, max_context, vocab_size}]
[[nodiscard]] msgpack::sbuffer encode_models(uint32_t msgid, const serving_target& target);
/// {status: "ok", uptime_s}
[[nodiscard]] msgpack::sbuffer encode_health(uint32_t msgid, const server_counters& counters);

/// Replies {uptime_s, requests, failed, cancelled, input_tokens, prefix_cache_hit_tokens,
/// output_tokens, output_tok_per_s, mean_request_output_tok_per_s, connections,
/// window: {seconds, requests, input_tokens, output_tokens, output_tok_per_s},
/// queue: {queued, running, admitted, rejected}, ranks: [{rank, role, running, blocks,
/// free_blocks, occupancy, occupancy_peak, occupancy_avg, peak_running, steps}]}, or a 503 when
/// a part does not answer (the server's stats_sampler, found through the supervisor, among them).
void spawn_stats_probe(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                       std::shared_ptr<server_counters> counters, uint32_t msgid, const reply_fn& reply);

/// Fault injection. admin.actors replies [{kind, index, restarts}] for every live supervised
/// actor; admin.kill has the supervisor kill one (it exits at once, as a crash would) and
/// replies {killed: true}, or a 422 naming the index when none such lives.
void spawn_admin_actors(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                        const reply_fn& reply);
void spawn_admin_kill(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                      const std::string& kind, int64_t index, const reply_fn& reply);

/// The supervised parts of `c` (queue, balancers, metrics, every rank) that `actors` (the
/// supervisor's live children) lacks, as "decode_rank 1, request_queue 0"; empty when all live.
[[nodiscard]] std::string missing_parts(const cluster& c, const std::vector<actor_info>& actors);

/// What keeps `c` from serving, from the supervisor's live children (`actors`); empty when
/// nothing does. In one process every missing part is being restarted: "restarting: " and
/// missing_parts. Where other nodes run the ranks (`ranks_remote`: a multi-process front), a
/// missing rank was lost with its node and its group's survivors serve without it (elastic EP):
/// only a missing front part ("restarting: ...") or a role with no rank left ("lost with their
/// nodes: every prefill rank") does.
[[nodiscard]] std::string not_serving(const cluster& c, const std::vector<actor_info>& actors,
                                      bool ranks_remote);

/// Replies {ready: true, latency_s} after a greedy 1-token generation of the BOS prompt, or a
/// 503 naming what failed (not_serving's reason first).
void spawn_ready_probe(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                       const reply_fn& reply);

}  // namespace moe::net
