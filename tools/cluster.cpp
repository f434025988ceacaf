// tools/cluster.cpp
// `moeserve cluster check FILE [--node NAME] [--model DIR]`: reads a cluster file
// (config/cluster.toml), checks every rule (with --model, that each role's ranks split the
// experts), and prints which node hosts what: the plan every process of the cluster will follow.
// `moeserve cluster ping FILE --node NAME`: joins a running node through its gate (CAF's
// middleman, the cluster's name and token) and asks its ranks for their stats.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include "actors/errors.hpp"
#include "actors/messages.hpp"
#include "actors/node_gate.hpp"
#include "actors/node_join.hpp"
#include "actors/rank/data_plane.hpp"
#include "actors/rank/nccl_transport.hpp"
#include "actors/system_config.hpp"
#include "config/cluster_file.hpp"
#include "tools/commands.hpp"

namespace moe::tools {
namespace {

struct cluster_check_options {
  std::string file;
  std::string node;
  std::string model_dir;
};

// "ranks 2-3" or "rank 2"
std::string rank_span(int64_t first, int64_t count) {
  return count == 1 ? "rank " + std::to_string(first)
                    : "ranks " + std::to_string(first) + "-" + std::to_string(first + count - 1);
}

// Which experts' slots ranks [first, first + count) of a group of `ranks` hold, when `slots` split evenly.
std::string slot_span(int64_t first, int64_t count, int64_t ranks, int64_t slots) {
  const int64_t per_rank = slots / ranks;
  return ", expert slots " + std::to_string(first * per_rank) + "-" +
         std::to_string((first + count) * per_rank - 1) + " of " + std::to_string(slots);
}

void run_cluster_check(const cluster_check_options& o) {
  const cluster_file c = load_cluster(o.file);
  int64_t slots = 0;
  if (!o.model_dir.empty()) {
    const model_config model = load_model_config(o.model_dir);
    validate_cluster_for_model(c, model, o.file);
    slots = model.n_routed_experts + c.topology.redundant_experts;
  }
  if (!o.node.empty())
    (void)find_node(c, o.node);
  if (c.data_plane == "ucx" && !ucx_plane_built())
    throw input_error(
      o.file + ": data_plane = \"ucx\", but this moeserve was built without UCX (Debian's "
               "libucx-dev): install it and re-run cmake, or set data_plane = \"auto\" or \"middleman\"");
  if (c.data_plane == "nccl" && !nccl_built())
    throw input_error(o.file +
                      ": data_plane = \"nccl\", but this moeserve was built without NCCL (it needs nvcc "
                      "and NCCL at build time): set data_plane = \"auto\", \"ucx\" or \"middleman\"");
  std::printf(
    "cluster %s: %zu nodes, %lld prefill ranks, %lld decode ranks, heartbeat %.3g s, timeout %.3g s, "
    "payloads between processes %s\n",
    c.name.c_str(), c.nodes.size(), static_cast<long long>(c.topology.prefill_ranks),
    static_cast<long long>(c.topology.decode_ranks), c.heartbeat_interval_s, c.connection_timeout_s,
    c.data_plane == "nccl"          ? "over NCCL"
    : wants_ucx_plane(c.data_plane) ? "over UCX"
                                    : "as CAF messages");
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const cluster_node& n = c.nodes[i];
    if (!o.node.empty() && n.name != o.node)
      continue;
    std::printf("  %s at %s:%lld:", n.name.c_str(), n.host.c_str(), static_cast<long long>(n.port));
    if (n.front) {
      std::printf(" front (wire port %lld, ", static_cast<long long>(n.rpc_port));
      if (n.http_port == 0)
        std::printf("HTTP off");
      else if (n.http_port == -1)
        std::printf("HTTP port %s", n.rpc_port == 0 ? "any free" : std::to_string(n.rpc_port + 1).c_str());
      else
        std::printf("HTTP port %lld", static_cast<long long>(n.http_port));
      std::printf(", request queue, balancers)");
    }
    if (n.prefill_ranks > 0) {
      const int64_t first = first_prefill_rank(c, i);
      std::printf(" prefill %s%s", rank_span(first, n.prefill_ranks).c_str(),
                  slots > 0 ? slot_span(first, n.prefill_ranks, c.topology.prefill_ranks, slots).c_str()
                            : "");
    }
    if (n.decode_ranks > 0) {
      const int64_t first = first_decode_rank(c, i);
      std::printf(" decode %s%s", rank_span(first, n.decode_ranks).c_str(),
                  slots > 0 ? slot_span(first, n.decode_ranks, c.topology.decode_ranks, slots).c_str() : "");
    }
    std::printf("\n");
  }
}

struct cluster_ping_options {
  std::string file;
  std::string node;
  std::optional<std::string> token;    // instead of the file's (and MOESERVE_CLUSTER_TOKEN)
  std::optional<std::string> cluster;  // instead of the file's name
  double timeout_s = 30.0;
};

// Joins node `o.node` as a peer would (retrying until it listens: nodes start in any order),
// then asks each of its ranks for its stats.
void run_cluster_ping(const cluster_ping_options& o) {
  const cluster_file c = load_cluster(o.file);
  const cluster_node& node = find_node(c, o.node);
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  configure_remote(cfg, c.heartbeat_interval_s, c.connection_timeout_s);
  caf::actor_system sys{cfg};
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(o.timeout_s));
  const std::string where = "node " + node.name + " at " + node.host + ":" + std::to_string(node.port);
  const std::optional<node_roster> roster = join_node(
    sys, node, o.cluster.value_or(c.name), o.token.value_or(c.token), "cluster ping", caf::actor{}, deadline);
  caf::scoped_actor self{sys};
  const auto wait = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(o.timeout_s));
  std::printf("%s: joined (cluster %s)\n", where.c_str(), c.name.c_str());
  const auto print_ranks = [&](const char* role, int64_t first, const std::vector<caf::actor>& ranks) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      const auto rank = static_cast<long long>(first) + static_cast<long long>(i);
      std::optional<rank_stats> stats;
      std::string error;
      self->request(ranks[i], wait, stats_atom::value)
        .receive([&](rank_stats& s) { stats = std::move(s); }, [&](caf::error& e) { error = sys.render(e); });
      if (!stats) {
        std::string what = where;
        what.append(": ").append(role).append(" rank ").append(std::to_string(rank));
        throw input_error(what.append(" did not answer stats: ").append(error));
      }
      std::printf(
        "  %s rank %lld: %lld of %lld KV blocks free, %lld running, %lld steps, %.1f MB of experts\n", role,
        rank, static_cast<long long>(stats->num_free_blocks), static_cast<long long>(stats->num_blocks),
        static_cast<long long>(stats->num_running), static_cast<long long>(stats->num_steps),
        static_cast<double>(stats->expert_bytes) / 1e6);
    }
  };
  print_ranks("prefill", roster->first_prefill_rank, roster->prefill_ranks);
  print_ranks("decode", roster->first_decode_rank, roster->decode_ranks);
}

}  // namespace

void add_cluster(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("cluster", "Multi-process clusters (config/cluster.toml)");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<cluster_check_options>();
  CLI::App* check = cmd->add_subcommand(
    "check", "Check a cluster file's rules and print which node hosts what (exit status 2 on an error)");
  check->add_option("file", opts->file, "The cluster file")->required();
  check->add_option("--node", opts->node,
                    "Print only this node (an error if the file has none of that name)");
  check->add_option("--model", opts->model_dir,
                    "A model directory: also check that each role's ranks split its experts");
  check->callback([opts] { run_cluster_check(*opts); });

  auto ping_opts = std::make_shared<cluster_ping_options>();
  CLI::App* ping = cmd->add_subcommand(
    "ping",
    "Join a running node of a cluster as a peer would, and print its ranks' stats (exit 2 if refused)");
  ping->add_option("file", ping_opts->file, "The cluster file")->required();
  ping->add_option("--node", ping_opts->node, "The node to reach")->required();
  ping->add_option("--token", ping_opts->token, "Present this token instead of the cluster's");
  ping->add_option("--cluster-name", ping_opts->cluster, "Present this cluster name instead of the file's");
  ping->add_option("--timeout", ping_opts->timeout_s, "Seconds to wait for the node to listen and answer")
    ->capture_default_str()
    ->check(CLI::Range(0.1, 3600.0));
  ping->callback([ping_opts] { run_cluster_ping(*ping_opts); });
  add_cluster_up(*cmd);
}

}  // namespace moe::tools
