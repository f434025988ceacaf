// actors/front_cluster.cpp
#include "actors/front_cluster.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <string>
#include <utility>

#include "actors/front_graph.hpp"
#include "actors/group_roster.hpp"
#include "config/model_config.hpp"

namespace moe {

std::vector<caf::actor> ranks_in_order(const std::vector<node_roster>& rosters, bool prefill, int64_t count) {
  const char* role = prefill ? "prefill" : "decode";
  std::vector<caf::actor> out(static_cast<size_t>(count));
  std::vector<std::string> hosts(out.size());
  for (const node_roster& r : rosters) {
    const int64_t first = prefill ? r.first_prefill_rank : r.first_decode_rank;
    const std::vector<caf::actor>& ranks = prefill ? r.prefill_ranks : r.decode_ranks;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int64_t at = first + static_cast<int64_t>(i);
      if (at < 0 || at >= count)
        throw input_error("node " + r.node + " lists " + role + " rank " + std::to_string(at) +
                          ", but the cluster has " + std::to_string(count));
      if (!hosts[static_cast<size_t>(at)].empty())
        throw input_error(std::string(role) + " rank " + std::to_string(at) + " is listed by nodes " +
                          hosts[static_cast<size_t>(at)] + " and " + r.node);
      hosts[static_cast<size_t>(at)] = r.node;
      out[static_cast<size_t>(at)] = ranks[i];
    }
  }
  for (size_t at = 0; at < out.size(); ++at)
    if (hosts[at].empty())
      throw input_error(std::string("no node lists ") + role + " rank " + std::to_string(at));
  return out;
}

bool split_over_nodes(const std::vector<node_roster>& rosters, bool prefill) {
  int nodes = 0;
  for (const node_roster& r : rosters)
    nodes += (prefill ? r.prefill_ranks : r.decode_ranks).empty() ? 0 : 1;
  return nodes > 1;
}

group_alive ranks_alive(const std::vector<node_roster>& rosters, bool prefill,
                        const std::vector<bool>& lost) {
  struct found_rank {
    int64_t index = 0;
    caf::actor rank;
    std::string data_address;
  };
  std::vector<found_rank> found;
  for (size_t i = 0; i < rosters.size(); ++i) {
    if (i < lost.size() && lost[i])
      continue;
    const node_roster& r = rosters[i];
    const int64_t first = prefill ? r.first_prefill_rank : r.first_decode_rank;
    const std::vector<caf::actor>& ranks = prefill ? r.prefill_ranks : r.decode_ranks;
    for (size_t k = 0; k < ranks.size(); ++k)
      found.push_back({first + static_cast<int64_t>(k), ranks[k], r.data_address});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  group_alive out;
  for (found_rank& f : found) {
    out.indices.push_back(f.index);
    out.ranks.push_back(std::move(f.rank));
    out.data_addresses.push_back(std::move(f.data_address));
  }
  return out;
}

void introduce_split_groups(const std::vector<node_roster>& rosters, const std::vector<bool>& lost,
                            int64_t num_prefill_ranks, int64_t first_step) {
  for (const bool prefill : {true, false}) {
    if (!split_over_nodes(rosters, prefill))
      continue;  // a node introduced a group it hosts whole
    group_alive alive = ranks_alive(rosters, prefill, lost);
    if (alive.ranks.empty())
      continue;
    for (int64_t& index : alive.indices)
      index += prefill ? 0 : num_prefill_ranks;
    introduce_across(alive.ranks, alive.indices, alive.data_addresses, first_step);
  }
}

cluster spawn_front_cluster(caf::actor_system& sys, const model_config& model,
                            std::shared_ptr<const tokenizer> tok, const topology_config& topo,
                            const std::vector<node_roster>& rosters) {
  cluster c;
  const std::vector<caf::actor> prefill = ranks_in_order(rosters, true, topo.prefill_ranks);
  const std::vector<caf::actor> decode = ranks_in_order(rosters, false, topo.decode_ranks);
  for (const caf::actor& r : prefill)
    c.prefill_ranks.push_back(caf::actor_cast<prefill_rank_actor>(r));
  for (const caf::actor& r : decode)
    c.decode_ranks.push_back(caf::actor_cast<decode_rank_actor>(r));
  introduce_split_groups(rosters, {}, topo.prefill_ranks, 0);
  const front_graph front = spawn_front_graph(
    sys, c, topo, served_context(topo, model.max_position_embeddings), std::move(tok), false);
  std::vector<child_spec> specs = front_child_specs(sys, c, front);
  const auto remote = [](const char* kind, size_t r, const caf::actor& handle) {
    return child_spec{.kind = kind,
                      .index = static_cast<int64_t>(r),
                      .restart = restart_policy::elsewhere,
                      .running = handle,
                      .start = [](const child_lookup&) -> caf::actor {
                        throw input_error("a rank of another node is started by its node");
                      },
                      .introduce = {}};
  };
  for (size_t r = 0; r < c.prefill_ranks.size(); ++r)
    specs.push_back(remote("prefill_rank", r, caf::actor_cast<caf::actor>(c.prefill_ranks[r])));
  for (size_t r = 0; r < c.decode_ranks.size(); ++r)
    specs.push_back(remote("decode_rank", r, caf::actor_cast<caf::actor>(c.decode_ranks[r])));
  c.supervisor = spawn_supervisor(
    sys, std::move(specs),
    {.max_restarts = topo.max_restarts,
     .period = std::chrono::milliseconds(static_cast<int64_t>(topo.restart_period_s * 1000.0))});
  c.root = caf::actor_cast<caf::actor>(c.supervisor);
  return c;
}

}  // namespace moe
