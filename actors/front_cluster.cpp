// actors/front_cluster.cpp
#include "actors/front_cluster.hpp"

#include <caf/actor_cast.hpp>
#include <caf/scoped_actor.hpp>
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
                            int64_t num_prefill_ranks, int64_t first_step, front_placements* kept) {
  for (const bool prefill : {true, false}) {
    if (!split_over_nodes(rosters, prefill))
      continue;  // a node introduced a group it hosts whole
    group_alive alive = ranks_alive(rosters, prefill, lost);
    if (alive.ranks.empty())
      continue;
    const bool whole = alive.ranks.size() == ranks_alive(rosters, prefill, {}).ranks.size();
    std::shared_ptr<const std::vector<layer_placement>> placements;
    uint64_t epoch = 0;
    if (kept != nullptr) {
      const std::lock_guard lock{kept->mutex};
      front_placements::group& g = prefill ? kept->prefill : kept->decode;
      g.first_step = first_step;
      g.whole = whole;
      if (whole) {  // survivors take a placement over themselves (ep_rank_core::set_membership)
        placements = g.placements;
        epoch = g.epoch;
      }
    }
    for (int64_t& index : alive.indices)
      index += prefill ? 0 : num_prefill_ranks;
    introduce_across(alive.ranks, alive.indices, alive.data_addresses, first_step, std::move(placements),
                     epoch);
  }
}

placement_keeper keep_front_placements(std::shared_ptr<front_placements> kept) {
  return
    [kept](const std::string& rank_kind, const placement_change& decision, bool renew) -> placement_kept {
      if (!decision.placements || (rank_kind != "prefill_rank" && rank_kind != "decode_rank"))
        return false;
      caf::actor watch;
      {
        const std::lock_guard lock{kept->mutex};
        front_placements::group& g = rank_kind == "prefill_rank" ? kept->prefill : kept->decode;
        if (!g.split)
          return g.node_keeper;  // the node hosting it whole keeps it, in the membership it gave
        if (!renew && (!g.whole || decision.membership_first_step != g.first_step))
          return false;  // planned for a membership that is gone, or for survivors
        if (renew && !kept->watch)
          return false;  // nothing can renew the group yet
        g.placements = decision.placements;
        g.epoch = decision.epoch;
        watch = kept->watch;
      }
      if (renew)
        caf::anon_send(watch, peers_atom::value);
      return true;
    };
}

void note_group_keepers(const std::vector<node_roster>& rosters, front_placements& kept) {
  const std::lock_guard lock{kept.mutex};
  for (const bool prefill : {true, false}) {
    front_placements::group& g = prefill ? kept.prefill : kept.decode;
    g.split = split_over_nodes(rosters, prefill);
    if (g.split)
      continue;
    for (const node_roster& r : rosters)
      if (!(prefill ? r.prefill_ranks : r.decode_ranks).empty())
        g.node_keeper = caf::actor_cast<placement_keeper_actor>(r.keeper);
  }
}

int64_t first_front_epoch(caf::actor_system& sys, const std::vector<node_roster>& rosters,
                          std::chrono::milliseconds timeout) {
  int64_t highest = 0;
  caf::scoped_actor self{sys};
  for (const bool prefill : {true, false}) {
    if (!split_over_nodes(rosters, prefill))
      continue;  // its node gives it its memberships
    for (const caf::actor& rank : ranks_alive(rosters, prefill, {}).ranks)
      self->request(caf::actor_cast<ep_member_actor>(rank), timeout, placement_atom::value)
        .receive([&](const placement_report& r) { highest = std::max(highest, r.membership_first_step); },
                 [](const caf::error&) {});
  }
  return epoch_after(highest);
}

cluster spawn_front_cluster(caf::actor_system& sys, const model_config& model,
                            std::shared_ptr<const tokenizer> tok, const topology_config& topo,
                            const std::vector<node_roster>& rosters, std::shared_ptr<front_placements> kept,
                            int64_t first_epoch) {
  cluster c;
  const std::vector<caf::actor> prefill = ranks_in_order(rosters, true, topo.prefill_ranks);
  const std::vector<caf::actor> decode = ranks_in_order(rosters, false, topo.decode_ranks);
  for (const caf::actor& r : prefill)
    c.prefill_ranks.push_back(caf::actor_cast<prefill_rank_actor>(r));
  for (const caf::actor& r : decode)
    c.decode_ranks.push_back(caf::actor_cast<decode_rank_actor>(r));
  note_group_keepers(rosters, *kept);
  introduce_split_groups(rosters, {}, topo.prefill_ranks, epoch_first_step(first_epoch), kept.get());
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
  // EPLB for each group (index 0 prefill, 1 decode, as in one process), after the ranks it
  // asks; the nodes' rosters say what one expert weighs and over how many nodes
  int64_t expert_bytes = 0;
  for (const node_roster& r : rosters)
    expert_bytes = std::max(expert_bytes, r.expert_bytes);
  if (model.n_routed_experts > 0) {
    const std::vector<expert_balancer_config> cfgs = expert_balancer_configs(model, expert_bytes, topo,
                                                                             ep_group{}.expert_window_steps);
    for (const bool prefill : {true, false}) {
      expert_balancer_config cfg = cfgs[prefill ? 0 : 1];
      int64_t nodes = 0;
      for (const node_roster& r : rosters)
        nodes += (prefill ? r.prefill_ranks : r.decode_ranks).empty() ? 0 : 1;
      // the hierarchical policy's nodes, where they split the ranks and the expert groups evenly
      cfg.num_nodes = cfg.num_ranks % nodes == 0 && cfg.num_groups % nodes == 0 ? nodes : 1;
      specs.push_back(expert_balancer_child(sys, prefill ? 0 : 1, std::move(cfg)));
    }
  }
  c.supervisor = spawn_supervisor(
    sys, std::move(specs),
    {.max_restarts = topo.max_restarts,
     .period = std::chrono::milliseconds(static_cast<int64_t>(topo.restart_period_s * 1000.0))},
    keep_front_placements(std::move(kept)));
  c.root = caf::actor_cast<caf::actor>(c.supervisor);
  return c;
}

}  // namespace moe
