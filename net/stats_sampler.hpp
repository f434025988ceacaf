// net/stats_sampler.hpp
// What `stats` reports beyond plain counters: every rank's KV occupancy (peak and average of
// regular samples since start) and the server's counters over a recent window.
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "net/serving_target.hpp"

namespace moe::net {

/// One rank's KV occupancy (blocks in use / blocks) over the samples since start.
struct rank_occupancy {
  double peak = 0.0;
  double average = 0.0;
  double latest = 0.0;
  int64_t peak_running = 0;
};

/// Counter increments over the last `seconds` (at most the window asked for).
struct window_counters {
  double seconds = 0.0;
  int64_t requests = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
};

struct sampled_stats {
  std::vector<rank_occupancy> ranks;  // prefill ranks, then decode ranks
  window_counters window;
};

/// Asks a stats sampler for its sampled_stats.
using sampled_atom = caf::atom_constant<caf::atom("sampled")>;

/// How often it samples, what window it reports, how often it logs.
struct sampler_config {
  std::chrono::milliseconds interval{500};
  std::chrono::seconds window{60};
  std::chrono::seconds log_interval{0};  // 0: never
};

/// The kind the cluster's supervisor knows the sampler by (index 0).
inline constexpr const char* stats_sampler_kind = "stats_sampler";

/// Samples every rank and the counters each `interval`; answers (sampled_atom) with
/// sampled_stats. Every `log_interval` in which something happened it logs a stats line
/// (server_log.hpp). Stop it with an exit message when the server stops.
[[nodiscard]] caf::actor spawn_stats_sampler(caf::actor_system& sys,
                                             std::shared_ptr<const serving_target> target,
                                             std::shared_ptr<const server_counters> counters,
                                             sampler_config cfg);

/// Spawns the sampler as a child of the cluster's supervisor (restarted if it crashes: its
/// occupancy figures start again), or unsupervised when there is none. Returns it.
caf::actor supervise_stats_sampler(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                                   std::shared_ptr<const server_counters> counters, sampler_config cfg);

/// Stops the sampler that lives now (the one supervise_stats_sampler started, or its successor).
void stop_stats_sampler(caf::actor_system& sys, const serving_target& target, const caf::actor& first);

}  // namespace moe::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::net::sampled_stats)
