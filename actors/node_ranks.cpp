// actors/node_ranks.cpp
#include "actors/node_ranks.hpp"

#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "actors/cluster.hpp"
#include "actors/decode_rank.hpp"
#include "actors/group_roster.hpp"
#include "actors/prefill_rank.hpp"
#include "actors/rank/copy_engine.hpp"
#include "actors/supervisor.hpp"
#include "config/thread_split.hpp"
#include "config/model_config.hpp"  // input_error
#include "kernels/model/kv_cache.hpp"

namespace moe {

void node_ranks::stop() const {
  for (const auto& ranks : {roster.prefill_ranks, roster.decode_ranks})
    for (const caf::actor& r : ranks)
      caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  for (const caf::actor& a : {copy_engine, roster.keeper})
    if (a)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

namespace {

// Keeps the expert balancers' decisions for the groups a node hosts whole in their rosters, one
// request at a time (nothing else on the node changes them: it restarts whole).
placement_keeper_actor spawn_group_keeper(caf::actor_system& sys, std::shared_ptr<group_roster> prefill,
                                          std::shared_ptr<group_roster> decode) {
  return sys.spawn([prefill, decode]() -> placement_keeper_actor::behavior_type {
    return {
      [prefill, decode](placement_atom, const std::string& rank_kind, const placement_change& d, bool renew) {
        return keep_placement(rank_kind, prefill.get(), decode.get(), d, renew);
      }};
  });
}

}  // namespace

rank_model_config rank_config_of(const topology_config& topo, bool reference, int64_t threads) {
  return {.reference = reference,
          .num_threads = static_cast<int>(threads),
          .num_kv_blocks = topo.kv_blocks,
          .block_size = topo.page_size,
          .max_context = topo.max_context,
          .chunk_size = topo.chunked_prefill_size,
          .max_prefill_tokens = topo.max_prefill_tokens};
}

node_ranks spawn_node_ranks(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                            const cluster_file& c, const cluster_node& node, bool reference) {
  const topology_config& topo = c.topology;
  const model_weights& w = *weights;
  require_kv_memory(node.prefill_ranks + node.decode_ranks, w.config.num_hidden_layers, topo.kv_blocks,
                    topo.page_size, w.config.kv_cache_dim(), "kv_cache.blocks of the cluster's topology");
  topology_config here = topo;  // this process's cores go to its own ranks
  here.prefill_ranks = std::max<int64_t>(node.prefill_ranks, 1);
  here.decode_ranks = std::max<int64_t>(node.decode_ranks, 1);
  const thread_split threads = threads_per_rank(here);
  const rank_model_config prefill_cfg = rank_config_of(topo, reference, threads.prefill);
  const rank_model_config decode_cfg = rank_config_of(topo, reference, threads.decode);
  const std::vector<std::vector<int>> cpus =
    topo.pin_threads
      ? assign_cpus(affinity_cpus(), detect_usable_cores().count, threads, node.prefill_ranks,
                    node.decode_ranks)
      : std::vector<std::vector<int>>(static_cast<size_t>(node.prefill_ranks + node.decode_ranks));
  node_ranks out;
  const copy_engine_actor copies = spawn_copy_engine(sys);
  out.copy_engine = caf::actor_cast<caf::actor>(copies);
  if (c.data_plane == "nccl") {  // each rank of a split group on a device of its own
    try {
      out.collective = start_nccl_transport(std::max(node.prefill_ranks, node.decode_ranks));
    } catch (const input_error& e) {
      throw input_error("node " + node.name + ": " + e.what());
    }
  } else if (wants_ucx_plane(c.data_plane)) {
    try {
      out.plane = start_ucx_plane(sys, node.host);
    } catch (const input_error&) {
      throw;                                 // not built with UCX
    } catch (const std::runtime_error& e) {  // UCX found no transport it may use
      if (c.data_plane == "ucx")
        throw input_error("node " + node.name + ": data_plane = \"ucx\", but " + e.what() +
                          " (check UCX_TLS and UCX_NET_DEVICES)");
      std::fprintf(stderr, "moeserve: node %s: UCX did not start (%s): payloads go as messages\n",
                   node.name.c_str(), e.what());
    }
  }
  const cluster_links links{
    .links = nullptr, .trace = nullptr, .copies = copies, .plane = out.plane, .collective = out.collective};
  size_t index = 0;  // the node's place in the file numbers its ranks
  while (index + 1 < c.nodes.size() && c.nodes[index].name != node.name)
    ++index;
  out.roster.node = node.name;
  out.roster.expert_bytes = routed_expert_bytes(w);
  out.roster.first_prefill_rank = first_prefill_rank(c, index);
  out.roster.first_decode_rank = first_decode_rank(c, index);
  ep_group prefill_group = make_group(w, topo, topo.prefill_ranks);
  for (int64_t r = 0; r < node.prefill_ranks; ++r) {
    prefill_group.rank = out.roster.first_prefill_rank + r;
    rank_model_config cfg = prefill_cfg;
    cfg.cpus = cpus[static_cast<size_t>(r)];
    out.roster.prefill_ranks.push_back(
      caf::actor_cast<caf::actor>(spawn_prefill_rank(sys, weights, std::move(cfg), prefill_group, links)));
  }
  ep_group decode_group = make_group(w, topo, topo.decode_ranks);
  for (int64_t r = 0; r < node.decode_ranks; ++r) {
    decode_group.rank = out.roster.first_decode_rank + r;
    rank_model_config cfg = decode_cfg;
    cfg.cpus = cpus[static_cast<size_t>(node.prefill_ranks + r)];
    out.roster.decode_ranks.push_back(
      caf::actor_cast<caf::actor>(spawn_decode_rank(sys, weights, std::move(cfg), decode_group, links)));
  }
  if (out.plane) {  // its peers in other processes send these ranks their payloads there
    for (const auto& ranks : {out.roster.prefill_ranks, out.roster.decode_ranks})
      for (const caf::actor& r : ranks)
        out.plane->attach(r);
    out.roster.data_address = out.plane->address();
  }
  // a group this node hosts whole learns its membership here (its inboxes are this process's);
  // a group across nodes is not joined yet (the front refuses it: actors/front_cluster.hpp)
  if (node.prefill_ranks > 0 && node.prefill_ranks == topo.prefill_ranks)
    out.prefill_group = introduce(out.roster.prefill_ranks, 0, prefill_group);
  if (node.decode_ranks > 0 && node.decode_ranks == topo.decode_ranks)
    out.decode_group = introduce(out.roster.decode_ranks, topo.prefill_ranks, decode_group);
  if (out.prefill_group || out.decode_group) {
    out.roster.keeper =
      caf::actor_cast<caf::actor>(spawn_group_keeper(sys, out.prefill_group, out.decode_group));
  }
  return out;
}

}  // namespace moe
