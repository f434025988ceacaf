// tools/serve_node.cpp
#include "tools/serve_node.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <unistd.h>

#include <atomic>

#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "actors/front_cluster.hpp"
#include "actors/node_gate.hpp"
#include "actors/node_join.hpp"
#include "actors/node_watch.hpp"
#include "actors/node_ranks.hpp"
#include "actors/system_config.hpp"
#include "config/cluster_file.hpp"

namespace moe::tools {
namespace {

// "prefill ranks 0-1, decode ranks 2-3" of a roster
std::string hosted(const node_roster& r) {
  const auto span = [](const char* role, int64_t first, size_t n) {
    const auto last = first + static_cast<int64_t>(n) - 1;
    return std::string(role) + (n == 1 ? " rank " + std::to_string(first)
                                       : " ranks " + std::to_string(first) + "-" + std::to_string(last));
  };
  std::string out;
  if (!r.prefill_ranks.empty())
    out = span("prefill", r.first_prefill_rank, r.prefill_ranks.size());
  if (!r.decode_ranks.empty())
    out += (out.empty() ? "" : ", ") + span("decode", r.first_decode_rank, r.decode_ranks.size());
  return out;
}

// What a rank's death recorded (empty: none), and whether the node is stopping anyway.
struct rank_death {
  std::mutex mutex;
  std::string what;
  std::atomic<bool> stopping{false};
};

// Monitors the node's ranks: the first that dies while the node serves is recorded and the node
// stops (SIGTERM to this process), whole. The front sees a node lost, as after kill -9: the
// groups it splits go on with their survivors, and a node started again (cluster up does it)
// rejoins with fresh ranks. A rank restarted alone here would leave a group it shares with
// other nodes waiting for the front to introduce it again; a node that restarts whole does not.
caf::actor watch_ranks(caf::actor_system& sys, const node_roster& roster, std::shared_ptr<rank_death> death) {
  return sys.spawn([roster, death](caf::event_based_actor* self) -> caf::behavior {
    std::map<caf::actor_addr, std::string> names;
    for (size_t i = 0; i < roster.prefill_ranks.size(); ++i)
      names[roster.prefill_ranks[i].address()] =
        "prefill rank " + std::to_string(roster.first_prefill_rank + static_cast<int64_t>(i));
    for (size_t i = 0; i < roster.decode_ranks.size(); ++i)
      names[roster.decode_ranks[i].address()] =
        "decode rank " + std::to_string(roster.first_decode_rank + static_cast<int64_t>(i));
    for (const auto* ranks : {&roster.prefill_ranks, &roster.decode_ranks})
      for (const caf::actor& rank : *ranks)
        self->monitor(rank);
    self->set_down_handler([self, death, names](caf::down_msg& dm) {
      if (death->stopping)
        return;
      {
        const std::lock_guard lock(death->mutex);
        if (death->what.empty())
          death->what = names.at(dm.source) + " died (" + self->system().render(dm.reason) + ")";
      }
      ::kill(::getpid(), SIGTERM);  // to the process: its main thread waits for it
    });
    return {[](stats_atom) {}};  // kept alive by its monitors; quits with an exit message
  });
}

}  // namespace

void run_cluster_node(const node_options& o, const std::string& model_dir, const weight_options& weights,
                      bool reference, const sigset_t& signals) {
  const cluster_file c = load_cluster(o.cluster_file);
  const cluster_node& node = find_node(c, o.node);
  validate_cluster_for_model(c, load_model_config(model_dir), o.cluster_file);
  auto w = std::make_shared<const model_weights>(load_weights(model_dir, weights, reference));

  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  configure_remote(cfg, c.heartbeat_interval_s, c.connection_timeout_s);
  caf::actor_system sys{cfg};
  const node_ranks ranks = spawn_node_ranks(sys, w, c, node, reference);
  auto death = std::make_shared<rank_death>();
  const caf::actor watcher = watch_ranks(sys, ranks.roster, death);
  std::vector<node_address> peers;  // the other nodes with ranks: connected to directly
  for (const cluster_node& n : c.nodes)
    if (!n.front && n.name != node.name)
      peers.push_back({.host = n.host, .port = static_cast<uint16_t>(n.port)});
  const node_gate_actor gate = spawn_node_gate(sys, ranks.roster, c.name, c.token, std::move(peers));
  auto port = sys.middleman().publish(gate, static_cast<uint16_t>(node.port), node.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    death->stopping = true;
    caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
    ranks.stop();
    throw input_error("node " + node.name + ": cannot listen on " + node.host + ":" +
                      std::to_string(node.port) + ": " + sys.render(port.error()));
  }
  std::printf("moeserve: node %s of cluster %s on %s:%u (%s; payloads from other processes %s)\n",
              node.name.c_str(), c.name.c_str(), node.host.c_str(), static_cast<unsigned>(*port),
              hosted(ranks.roster).c_str(),
              ranks.collective ? "over NCCL"
              : ranks.plane    ? "over UCX"
                               : "as messages");
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  death->stopping = true;
  std::string died;
  {
    const std::lock_guard lock(death->mutex);
    died = death->what;
  }
  std::printf("moeserve: node %s stopping%s\n", node.name.c_str(),
              died.empty() ? "" : (": its " + died).c_str());
  if (ranks.plane) {
    const data_plane_stats s = ranks.plane->stats();
    std::printf("moeserve: node %s data plane (UCX): %llu payloads sent (%llu bytes), %llu received "
                "(%llu bytes), %llu dropped\n",
                node.name.c_str(), static_cast<unsigned long long>(s.messages_sent),
                static_cast<unsigned long long>(s.bytes_sent),
                static_cast<unsigned long long>(s.messages_received),
                static_cast<unsigned long long>(s.bytes_received),
                static_cast<unsigned long long>(s.dropped));
  }
  std::fflush(stdout);
  caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
  ranks.stop();
  if (!died.empty())
    throw std::runtime_error("node " + node.name + ": its " + died +
                             "; the node stopped whole (start it again: its front joins it again)");
}

cluster join_cluster(caf::actor_system& sys, const cluster_file& c, const cluster_node& front,
                     const model_config& model, std::shared_ptr<const tokenizer> tok,
                     std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<const cluster_node*> awaited;
  for (const cluster_node& n : c.nodes)
    if (n.prefill_ranks + n.decode_ranks > 0)
      awaited.push_back(&n);
  std::vector<node_roster> rosters;
  // what the nodes know this front by while it serves (a second front is refused meanwhile)
  const caf::actor front_actor =
    sys.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](stats_atom) {}}; });
  // one node at a time, each tried until it listens: a later one's wait is the earlier ones' too
  try {
    for (size_t i = 0; i < awaited.size(); ++i) {
      std::string names;
      for (size_t j = i; j < awaited.size(); ++j)
        names += (names.empty() ? "" : ", ") + awaited[j]->name;
      std::printf("moeserve: front %s of cluster %s: waiting for %s\n", front.name.c_str(), c.name.c_str(),
                  names.c_str());
      std::fflush(stdout);
      rosters.push_back(join_node(sys, *awaited[i], c.name, c.token, front.name, front_actor, deadline));
      std::printf("moeserve: joined node %s (%s)\n", awaited[i]->name.c_str(),
                  hosted(rosters.back()).c_str());
      std::fflush(stdout);
    }
  } catch (...) {  // refused or unanswered: the actor system ends only once this actor has
    caf::anon_send_exit(front_actor, caf::exit_reason::user_shutdown);
    throw;
  }
  auto kept = std::make_shared<front_placements>();
  // nodes that ran under an earlier front: its memberships are left behind, not undercut
  const int64_t first_epoch = first_front_epoch(sys, rosters, std::chrono::seconds(5));
  cluster out = spawn_front_cluster(sys, model, std::move(tok), c.topology, rosters, kept, first_epoch);
  out.node_watch = spawn_node_watch(sys, {.file = c,
                                          .self_name = front.name,
                                          .supervisor = out.root,
                                          .rosters = std::move(rosters),
                                          .kept = kept,
                                          .front = front_actor,
                                          .first_epoch = first_epoch});
  const std::lock_guard lock{kept->mutex};
  kept->watch = out.node_watch;
  return out;
}

}  // namespace moe::tools
