// actors/cluster.cpp
#include "actors/cluster.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>

#include "actors/expert_balancer.hpp"
#include "actors/front_graph.hpp"
#include "actors/group_roster.hpp"
#include "actors/node_ranks.hpp"
#include "actors/watchdog.hpp"
#include "config/thread_split.hpp"
#include "kernels/model/dispatch_payload.hpp"
#include "kernels/model/kv_cache.hpp"

namespace moe {

ep_precision ep_precision_of(const topology_config& topology) {
  payload_dtype dispatch = payload_dtype::fp8;
  if (!parse_payload_dtype(topology.dispatch_dtype, dispatch))
    throw input_error("dispatch_dtype: expected fp8, bf16 or fp32, got " + topology.dispatch_dtype);
  combine_sum sum = combine_sum::per_pair;
  if (!parse_combine_sum(topology.combine, sum))
    throw input_error("combine: expected exact or reduced, got " + topology.combine);
  return {.dispatch = dispatch,
          .combine = dispatch == payload_dtype::fp32 ? payload_dtype::fp32 : payload_dtype::bf16,
          .sum = sum};
}

std::string rank_kind(const cluster& c, size_t i) {
  return i < c.prefill_ranks.size() ? "prefill_rank" : "decode_rank";
}

int64_t rank_index(const cluster& c, size_t i) {
  return static_cast<int64_t>(i < c.prefill_ranks.size() ? i : i - c.prefill_ranks.size());
}

void cluster::stop() const {
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  if (copy_engine)
    caf::anon_send_exit(copy_engine, caf::exit_reason::user_shutdown);
  if (node_watch)
    caf::anon_send_exit(node_watch, caf::exit_reason::user_shutdown);
}

namespace {

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

ep_group make_group(const model_weights& w, const topology_config& topo, int64_t num_ranks) {
  const int64_t E = w.config.n_routed_experts, R = topo.redundant_experts;
  return {.rank = 0,
          .num_ranks = num_ranks,
          .placements = E > 0 ? default_placements(w, num_ranks, R) : nullptr,
          .ep = ep_precision_of(topo),
          .num_micro_batches = topo.two_batch_overlap ? 2 : 1};
}

namespace {

// Keeps the expert balancers' decisions in the group rosters (supervisor.hpp's placement_keeper).
placement_keeper keep_placements(std::shared_ptr<group_roster> prefill,
                                 std::shared_ptr<group_roster> decode) {
  return [prefill, decode](const std::string& rank_kind, const placement_change& d, bool renewing) {
    return placement_kept{keep_placement(rank_kind, prefill.get(), decode.get(), d, renewing)};
  };
}

template <class Handle>
caf::actor untyped(const Handle& h) {
  return caf::actor_cast<caf::actor>(h);
}

template <class Handle>
std::vector<caf::actor> untyped_all(const std::vector<Handle>& hs) {
  std::vector<caf::actor> out;
  out.reserve(hs.size());
  for (const Handle& h : hs)
    out.push_back(untyped(h));
  return out;
}

// A group's expert balancer (if the model has one) learns its rank r's new handle.
void tell_expert_balancer(const caf::actor& balancer, size_t r, const caf::actor& fresh) {
  if (balancer)
    caf::anon_send(caf::actor_cast<expert_balancer_actor>(balancer), peers_atom::value,
                   static_cast<int64_t>(r), fresh);
}

// What the supervisor restarts, and whom it re-introduces a restarted actor to.
// How a rank is spawned again: what spawn_cluster gave it the first time.
struct rank_recipe {
  std::shared_ptr<const model_weights> weights;
  rank_model_config prefill_cfg, decode_cfg;  // their threads differ (config/thread_split.hpp)
  std::vector<std::vector<int>> cpus;         // --pin-threads: each rank's, prefill ranks first
  ep_group prefill_group, decode_group;       // `rank` set per restart
  cluster_links links;
  std::shared_ptr<group_roster> prefill_roster, decode_roster;
};

std::vector<child_spec> child_specs(caf::actor_system& sys, const cluster& c, const rank_recipe& recipe,
                                    const front_graph& front,
                                    const std::vector<expert_balancer_config>& expert_cfgs) {
  std::vector<child_spec> specs = front_child_specs(sys, c, front);
  const size_t num_prefill = c.prefill_ranks.size(), num_decode = c.decode_ranks.size();
  // A rank restarts empty (with its experts) and its requests are placed again by their
  // sessions; in a group of several it rejoins its peers in a new epoch (rejoin).
  for (size_t r = 0; r < c.prefill_ranks.size(); ++r)
    specs.push_back(
      {.kind = "prefill_rank",
       .index = static_cast<int64_t>(r),
       .restart = restart_policy::permanent,
       .running = untyped(c.prefill_ranks[r]),
       .start =
         [&sys, recipe, r](const child_lookup&) {
           ep_group g = recipe.prefill_group;
           g.rank = static_cast<int64_t>(r);
           rank_model_config cfg = recipe.prefill_cfg;
           cfg.cpus = recipe.cpus[r];
           return untyped(
             spawn_prefill_rank(sys, recipe.weights, std::move(cfg), std::move(g), recipe.links));
         },
       .introduce =
         [r, roster = recipe.prefill_roster](const caf::actor& fresh, const child_lookup& current) {
           rejoin(*roster, r, fresh);
           tell_expert_balancer(current("expert_balancer", 0), r, fresh);
           introduce_prefill_rank(current, static_cast<int64_t>(r), fresh);
         }});
  for (size_t r = 0; r < num_decode; ++r)
    specs.push_back(
      {.kind = "decode_rank",
       .index = static_cast<int64_t>(r),
       .restart = restart_policy::permanent,
       .running = untyped(c.decode_ranks[r]),
       .start =
         [&sys, recipe, r, num_prefill](const child_lookup&) {
           ep_group g = recipe.decode_group;
           g.rank = static_cast<int64_t>(r);
           rank_model_config cfg = recipe.decode_cfg;
           cfg.cpus = recipe.cpus[num_prefill + r];
           return untyped(spawn_decode_rank(sys, recipe.weights, std::move(cfg), std::move(g), recipe.links));
         },
       .introduce =
         [r, roster = recipe.decode_roster](const caf::actor& fresh, const child_lookup& current) {
           rejoin(*roster, r, fresh);
           tell_expert_balancer(current("expert_balancer", 1), r, fresh);
           introduce_decode_rank(current, static_cast<int64_t>(r), fresh);
         }});
  // An expert balancer per EP group (after the ranks it asks): it records its decisions with
  // the supervisor, and learns a rank's restart from the rank's introduction.
  for (size_t index = 0; index < expert_cfgs.size(); ++index)
    specs.push_back(expert_balancer_child(sys, static_cast<int64_t>(index), expert_cfgs[index]));
  return specs;
}

}  // namespace

int64_t routed_expert_bytes(const model_weights& w) {
  for (const layer_weights& l : w.layers)
    if (l.is_moe && !l.moe.experts.empty())
      return mlp_bytes(l.moe.experts[0]);
  return 0;
}

std::vector<expert_balancer_config> expert_balancer_configs(const model_config& model, int64_t expert_bytes,
                                                            const topology_config& topo,
                                                            int64_t window_steps) {
  std::vector<expert_balancer_config> out;
  for (const bool prefill : {true, false}) {
    const int64_t num_ranks = prefill ? topo.prefill_ranks : topo.decode_ranks;
    const int64_t per_node = std::max<int64_t>(1, topo.ranks_per_node);
    out.push_back({.role = prefill ? "prefill" : "decode",
                   .rank_kind = prefill ? "prefill_rank" : "decode_rank",
                   .supervisor = {},  // the supervisor's, when it starts the balancer
                   .num_ranks = num_ranks,
                   .num_logical = model.n_routed_experts,
                   .num_groups = std::max<int64_t>(1, model.n_group),
                   .num_nodes = num_ranks % per_node == 0 ? num_ranks / per_node : 1,
                   .expert_bytes = expert_bytes,
                   .settings = {.policy = topo.expert_balancer,
                                .interval_steps = topo.eplb_interval_steps,
                                .window_steps = window_steps,
                                .redundant_experts = topo.redundant_experts,
                                .minimal_movement = true,
                                .num_logical = model.n_routed_experts}});
  }
  return out;
}

child_spec expert_balancer_child(caf::actor_system& sys, int64_t index, expert_balancer_config cfg) {
  return {.kind = "expert_balancer",
          .index = index,
          .restart = restart_policy::permanent,
          .running = {},
          .start =
            [&sys, cfg = std::move(cfg)](const child_lookup& current) {
              expert_balancer_config with = cfg;
              with.supervisor = current("supervisor", 0);
              std::vector<caf::actor> ranks;
              for (int64_t r = 0; r < with.num_ranks; ++r)  // one restarting: introduced later
                ranks.push_back(current(with.rank_kind, r));
              return untyped(spawn_expert_balancer(sys, std::move(ranks), std::move(with)));
            },
          .introduce = {},
          .worker_kind = {},
          .configurable = true};
}

cluster spawn_cluster(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                      std::shared_ptr<const tokenizer> tok, const cluster_config& cfg) {
  const topology_config& topo = cfg.topology;
  validate(topo);
  const model_weights& w = *weights;
  validate_for_model(topo, w.config);
  require_kv_memory(topo.prefill_ranks + topo.decode_ranks, w.config.num_hidden_layers, topo.kv_blocks,
                    topo.page_size, w.config.kv_cache_dim(), "--kv-blocks (kv_cache.blocks)");
  ep_group prefill_group = make_group(w, topo, topo.prefill_ranks);
  ep_group decode_group = make_group(w, topo, topo.decode_ranks);
  const thread_split threads = threads_per_rank(topo);
  rank_model_config rank_cfg = rank_config_of(topo, cfg.reference, threads.prefill);
  rank_cfg.synchronous_stream = cfg.synchronous_streams;
  rank_model_config decode_rank_cfg = rank_cfg;
  decode_rank_cfg.num_threads = static_cast<int>(threads.decode);
  const std::vector<std::vector<int>> cpus =
    topo.pin_threads
      ? assign_cpus(affinity_cpus(), detect_usable_cores().count, threads, topo.prefill_ranks,
                    topo.decode_ranks)
      : std::vector<std::vector<int>>(static_cast<size_t>(topo.prefill_ranks + topo.decode_ranks));
  cluster c;
  if (cfg.trace)
    c.trace = std::make_shared<trace_recorder>(true);
  if (topo.link_model)
    c.links = std::make_shared<link_model>(link_model_config{.ranks_per_node = topo.ranks_per_node,
                                                             .intra_node = topo.intra_node,
                                                             .inter_node = topo.inter_node,
                                                             .even_steps_only = cfg.link_even_steps_only},
                                           topo.prefill_ranks + topo.decode_ranks);
  // told to watch the supervisor below; inline streams keep it off a thread of its own too
  const copy_engine_actor copies = spawn_copy_engine(sys, !cfg.synchronous_streams);
  c.copy_engine = caf::actor_cast<caf::actor>(copies);
  const cluster_links links{.links = c.links, .trace = c.trace, .copies = copies};
  for (int64_t r = 0; r < topo.prefill_ranks; ++r) {
    prefill_group.rank = r;
    rank_model_config cfg = rank_cfg;
    cfg.cpus = cpus[static_cast<size_t>(r)];
    c.prefill_ranks.push_back(spawn_prefill_rank(sys, weights, std::move(cfg), prefill_group, links));
    if (c.trace)
      c.trace->name_rank(r, "prefill_rank " + std::to_string(r));
  }
  for (int64_t r = 0; r < topo.decode_ranks; ++r) {
    decode_group.rank = r;
    rank_model_config cfg = decode_rank_cfg;
    cfg.cpus = cpus[static_cast<size_t>(topo.prefill_ranks + r)];
    c.decode_ranks.push_back(spawn_decode_rank(sys, weights, std::move(cfg), decode_group, links));
    if (c.trace)
      c.trace->name_rank(topo.prefill_ranks + r, "decode_rank " + std::to_string(r));
  }
  std::shared_ptr<group_roster> prefill_roster = introduce(untyped_all(c.prefill_ranks), 0, prefill_group);
  std::shared_ptr<group_roster> decode_roster = introduce(untyped_all(c.decode_ranks), topo.prefill_ranks,
                                                          decode_group);
  const front_graph front =
    spawn_front_graph(sys, c, topo, served_context(topo, w.config.max_position_embeddings), std::move(tok));
  const rank_recipe recipe{.weights = weights,
                           .prefill_cfg = rank_cfg,
                           .decode_cfg = decode_rank_cfg,
                           .cpus = cpus,
                           .prefill_group = prefill_group,
                           .decode_group = decode_group,
                           .links = links,
                           .prefill_roster = prefill_roster,
                           .decode_roster = decode_roster};
  const restart_limits limits{.max_restarts = topo.max_restarts, .period = millis(topo.restart_period_s)};
  const std::vector<expert_balancer_config> expert_cfgs =
    w.config.n_routed_experts > 0
      ? expert_balancer_configs(w.config, routed_expert_bytes(w), topo, prefill_group.expert_window_steps)
      : std::vector<expert_balancer_config>{};
  c.supervisor = spawn_supervisor(sys, child_specs(sys, c, recipe, front, expert_cfgs), limits,
                                  keep_placements(prefill_roster, decode_roster));
  c.root = untyped(c.supervisor);
  caf::anon_send(copies, watch_atom::value, c.root);
  if (const std::chrono::milliseconds stall = millis(topo.stall_timeout_s); stall.count() > 0) {
    watchdog_config w{
      .watched = {}, .period = std::min(std::chrono::milliseconds(1000), stall / 4), .stall_timeout = stall};
    for (size_t i = 0; i < c.prefill_ranks.size() + c.decode_ranks.size(); ++i)
      w.watched.emplace_back(rank_kind(c, i), rank_index(c, i));
    c.watchdog = spawn_watchdog(sys, c.supervisor, std::move(w));
  }
  return c;
}

}  // namespace moe
