// actors/cluster.hpp
// Spawns the serving graph from the topology: request_queue -> prefill_balancer -> prefill_rank x P
// (one EP group) -> decode_rank x D (another EP group), with the decode_balancer choosing decode
// ranks, all children of one supervisor (actors/supervisor.hpp). Every part is restarted when it
// dies; a rank of an EP group of two or more rejoins its group in a new epoch (its peers abandon
// the step it left and re-run its requests). A watchdog (actors/watchdog.hpp) kills ranks that
// stop making progress.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "actors/decode_balancer.hpp"
#include "actors/expert_balancer.hpp"
#include "actors/prefill_balancer.hpp"
#include "actors/request_queue.hpp"
#include "actors/supervisor.hpp"
#include "config/topology.hpp"

namespace moe {

struct cluster_config {
  topology_config topology;
  bool reference = false;             // CPU reference backend on every rank (bit-exact runs)
  bool trace = false;                 // record a Chrome trace
  bool link_even_steps_only = false;  // link_model_config::even_steps_only (benchmarks)
  bool synchronous_streams = false;   // every rank's stream and the copy engine run inline (1P + 1D)
  // The restart limits, the watchdog's stall timeout (0: none, as the deterministic tests that
  // run one message at a time want) and the migration limit come from the topology.
};

/// Handles of one running cluster.
struct cluster {
  request_queue_actor queue;  // clients submit here: (submit_atom, request_spec) -> id (the first
                              // instance: after a restart, supervisor lookup gives the current one)
  prefill_balancer_actor prefill_balancer;
  decode_balancer_actor decode_balancer;
  std::vector<prefill_rank_actor> prefill_ranks;  // global ranks 0 .. P-1
  std::vector<decode_rank_actor> decode_ranks;    // global ranks P .. P+D-1
  std::shared_ptr<trace_recorder> trace;          // null unless cluster_config::trace
  std::shared_ptr<link_model> links;              // null unless the topology turns the link model on
  supervisor_actor supervisor;  // every part above is its child; lookup gives current handles
  caf::actor root;              // the supervisor: its exit stops them all; it exits if one cannot recover
  caf::actor watchdog;          // kills ranks that stop making progress (null when off)
  caf::actor copy_engine;       // expert moves' copies, at low priority (actors/rank/copy_engine.hpp)
  caf::actor node_watch;        // a multi-process front's: joins lost nodes again (actors/node_watch.hpp)

  /// Stops every actor of the cluster.
  void stop() const;
};

/// Rank `i` of the cluster's prefill ranks then decode ranks, as its supervisor names it
/// (asking the supervisor reaches the rank that lives now, restarted or not).
[[nodiscard]] std::string rank_kind(const cluster& c, size_t i);
[[nodiscard]] int64_t rank_index(const cluster& c, size_t i);

/// The EP payload types a topology asks for ("fp8" dispatch combines in BF16).
[[nodiscard]] ep_precision ep_precision_of(const topology_config& topology);

/// An expert-parallel group of `num_ranks` (its rank 0's view): the default placement of the
/// routed experts over num_ranks x (experts + redundant slots) / num_ranks slots, the topology's
/// precision and micro-batches. The split was checked by validate_for_model.
[[nodiscard]] ep_group make_group(const model_weights& w, const topology_config& topo, int64_t num_ranks);

/// One routed expert's bytes in `w` (every expert has the same shapes): what a move of it copies.
[[nodiscard]] int64_t routed_expert_bytes(const model_weights& w);

/// The expert balancers' configurations: index 0 the prefill group's, 1 the decode group's, over
/// `window_steps` of routed load; `expert_bytes`: one routed expert's.
[[nodiscard]] std::vector<expert_balancer_config> expert_balancer_configs(const model_config& model,
                                                                          int64_t expert_bytes,
                                                                          const topology_config& topo,
                                                                          int64_t window_steps);

/// The supervisor's child for expert balancer `index` (0 prefill, 1 decode) of `cfg`, started
/// after the ranks it asks (a rank restarting then is introduced to it later); it records its
/// decisions with the supervisor.
[[nodiscard]] child_spec expert_balancer_child(caf::actor_system& sys, int64_t index,
                                               expert_balancer_config cfg);

/// Checks the topology against the model (redundant experts must split evenly over each group)
/// and spawns the cluster. Throws input_error naming the setting that does not fit.
[[nodiscard]] cluster spawn_cluster(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                                    std::shared_ptr<const tokenizer> tok, const cluster_config& cfg);

}  // namespace moe
