// tools/cluster.cpp
// `moeserve cluster check FILE [--node NAME] [--model DIR]`: reads a cluster file
// (config/cluster.toml), checks every rule (with --model, that each role's ranks split the
// experts), and prints which node hosts what: the plan every process of the cluster will follow.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

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
  std::printf(
    "cluster %s: %zu nodes, %lld prefill ranks, %lld decode ranks, heartbeat %.3g s, timeout %.3g s\n",
    c.name.c_str(), c.nodes.size(), static_cast<long long>(c.topology.prefill_ranks),
    static_cast<long long>(c.topology.decode_ranks), c.heartbeat_interval_s, c.connection_timeout_s);
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
}

}  // namespace moe::tools
