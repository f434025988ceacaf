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

/// Samples every rank and the counters each `interval`; answers (sampled_atom) with
/// sampled_stats. Every `log_interval` (0: never) in which something happened it logs a stats
/// line (server_log.hpp). Stop it with an exit message when the server stops.
[[nodiscard]] caf::actor spawn_stats_sampler(caf::actor_system& sys,
                                             std::shared_ptr<const serving_target> target,
                                             std::shared_ptr<const server_counters> counters,
                                             std::chrono::milliseconds interval, std::chrono::seconds window,
                                             std::chrono::seconds log_interval = std::chrono::seconds{0});

}  // namespace moe::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::net::sampled_stats)
