// actors/node_watch.cpp
#include "actors/node_watch.hpp"

#include <caf/blocking_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "actors/front_cluster.hpp"
#include "actors/front_graph.hpp"
#include "actors/group_roster.hpp"
#include "actors/node_join.hpp"
#include "actors/supervisor.hpp"

namespace moe {
namespace {

using rejoin_tick = caf::atom_constant<caf::atom("rejointk")>;

constexpr auto rejoin_period = std::chrono::milliseconds(500);

struct watch_state {
  node_watch_config cfg;
  std::map<caf::actor_addr, size_t> node_of;  // a monitored rank -> its roster's index
  std::set<size_t> lost;                      // rosters whose node is down
  int64_t epoch = 0;                          // memberships sent to split groups
};

void watch_ranks(caf::blocking_actor* self, watch_state& st, size_t i) {
  const node_roster& r = st.cfg.rosters[i];
  for (const auto* ranks : {&r.prefill_ranks, &r.decode_ranks})
    for (const caf::actor& a : *ranks) {
      self->monitor(a);
      st.node_of[a.address()] = i;
    }
}

// The supervisor's current handle of (kind, index).
caf::actor lookup(caf::blocking_actor* self, const caf::actor& supervisor, const std::string& kind,
                  int64_t index) {
  caf::actor out;
  self
    ->request(caf::actor_cast<supervisor_actor>(supervisor), std::chrono::seconds(5), lookup_atom::value,
              kind, index)
    .receive([&](caf::actor& a) { out = std::move(a); }, [](const caf::error&) {});
  return out;
}

// The groups split over nodes, with the ranks on the nodes up now (all, or the survivors of a
// lost node, which go on alone: elastic EP): memberships of a new epoch.
void renew_split_groups(watch_state& st) {
  std::vector<bool> lost(st.cfg.rosters.size(), false);
  for (const size_t i : st.lost)
    lost[i] = true;
  introduce_split_groups(st.cfg.rosters, lost, st.cfg.file.topology.prefill_ranks,
                         epoch_first_step(++st.epoch), st.cfg.kept.get());
}

// Node `i` answered again with `roster`: its ranks take the lost ones' places.
void rejoined(caf::blocking_actor* self, watch_state& st, size_t i, node_roster roster) {
  st.cfg.rosters[i] = std::move(roster);
  const node_roster& r = st.cfg.rosters[i];
  const caf::actor& sup = st.cfg.supervisor;
  // the lost ones' places as the supervisor's children (it never restarts them: their node does)
  const auto adopt = [&](const char* kind, int64_t index, const caf::actor& rank) {
    caf::anon_send(caf::actor_cast<supervisor_actor>(sup), start_atom::value,
                   child_spec{.kind = kind,
                              .index = index,
                              .restart = restart_policy::elsewhere,
                              .running = rank,
                              .start = {},
                              .introduce = {}});
  };
  for (size_t k = 0; k < r.prefill_ranks.size(); ++k)
    adopt("prefill_rank", r.first_prefill_rank + static_cast<int64_t>(k), r.prefill_ranks[k]);
  for (size_t k = 0; k < r.decode_ranks.size(); ++k)
    adopt("decode_rank", r.first_decode_rank + static_cast<int64_t>(k), r.decode_ranks[k]);
  if (st.cfg.kept)  // a group it hosts whole: its fresh membership keeps the decisions now
    note_group_keepers(st.cfg.rosters, *st.cfg.kept);
  renew_split_groups(st);
  // the balancers learn them as they learn a restarted rank
  const child_lookup current = [&](const std::string& kind, int64_t index) {
    return lookup(self, sup, kind, index);
  };
  // and the group's expert balancer (index 0 prefill, 1 decode)
  const auto tell_expert_balancer = [&](int64_t balancer, int64_t index, const caf::actor& rank) {
    if (const caf::actor b = current("expert_balancer", balancer))
      caf::anon_send(caf::actor_cast<expert_balancer_actor>(b), peers_atom::value, index, rank);
  };
  for (size_t k = 0; k < r.prefill_ranks.size(); ++k) {
    const int64_t index = r.first_prefill_rank + static_cast<int64_t>(k);
    introduce_prefill_rank(current, index, r.prefill_ranks[k]);
    tell_expert_balancer(0, index, r.prefill_ranks[k]);
  }
  for (size_t k = 0; k < r.decode_ranks.size(); ++k) {
    const int64_t index = r.first_decode_rank + static_cast<int64_t>(k);
    introduce_decode_rank(current, index, r.decode_ranks[k]);
    tell_expert_balancer(1, index, r.decode_ranks[k]);
  }
  watch_ranks(self, st, i);
}

void try_rejoin(caf::blocking_actor* self, watch_state& st) {
  for (auto it = st.lost.begin(); it != st.lost.end();) {
    const size_t i = *it;
    const cluster_node& node = find_node(st.cfg.file, st.cfg.rosters[i].node);
    try {
      node_roster roster = join_node(self->system(), node, st.cfg.file.name, st.cfg.file.token,
                                     st.cfg.self_name, st.cfg.front,
                                     std::chrono::steady_clock::now() + std::chrono::milliseconds(1000));
      std::printf("moeserve: node %s rejoined\n", node.name.c_str());
      std::fflush(stdout);
      it = st.lost.erase(it);
      rejoined(self, st, i, std::move(roster));
    } catch (const input_error&) {
      ++it;  // not back yet (or refusing): tried again next period
    }
  }
}

}  // namespace

caf::actor spawn_node_watch(caf::actor_system& sys, node_watch_config cfg) {
  return sys.spawn<caf::detached>([cfg = std::move(cfg)](caf::blocking_actor* self) {
    watch_state st{.cfg = cfg, .node_of = {}, .lost = {}, .epoch = cfg.first_epoch};
    for (size_t i = 0; i < st.cfg.rosters.size(); ++i)
      watch_ranks(self, st, i);
    bool ticking = false;
    bool running = true;
    self->receive_while([&] { return running; })(
      [&](caf::down_msg& dm) {
        const auto it = st.node_of.find(dm.source);
        if (it == st.node_of.end())
          return;
        const size_t i = it->second;
        st.node_of.erase(it);
        if (st.lost.insert(i).second) {
          std::printf("moeserve: node %s is down: joining it again every %lld ms\n",
                      st.cfg.rosters[i].node.c_str(), static_cast<long long>(rejoin_period.count()));
          std::fflush(stdout);
          renew_split_groups(st);  // the survivors go on without it
        }
        if (!ticking) {
          ticking = true;
          self->delayed_send(self, rejoin_period, rejoin_tick::value);
        }
      },
      [&](peers_atom) { renew_split_groups(st); },  // a decision to carry (keep_front_placements)
      [&](rejoin_tick) {
        try_rejoin(self, st);
        ticking = !st.lost.empty();
        if (ticking)
          self->delayed_send(self, rejoin_period, rejoin_tick::value);
      },
      [&](caf::exit_msg& em) {
        if (em.reason)
          running = false;
      });
    if (st.cfg.front)  // the nodes let go of this front
      caf::anon_send_exit(st.cfg.front, caf::exit_reason::user_shutdown);
  });
}

}  // namespace moe
