// tools/eplb_plan.cpp
// `moeserve eplb-plan`: plans an expert placement offline from a recorded load matrix (what
// `moeserve ctl expert-load` writes), with DeepSeek's EPLB (actors/policy/eplb.hpp), and prints
// {"phy2log", "log2phy", "logcnt"} as JSON.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "actors/policy/eplb.hpp"
#include "config/model_config.hpp"
#include "tools/commands.hpp"
#include "tools/expert_load_json.hpp"

namespace moe::tools {
namespace {

struct eplb_plan_options {
  std::string load_file;
  int64_t replicas = 0, groups = 1, nodes = 1, ranks = 1;
};

std::string read_load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw input_error("--load: cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void run_eplb_plan(const eplb_plan_options& o) {
  const matrix<double> load = parse_expert_load(read_load_file(o.load_file), o.load_file);
  check_plan_shape(load, o.replicas, o.groups, o.nodes, o.ranks);
  const expert_plan plan = rebalance_experts(load, o.replicas, o.groups, o.nodes, o.ranks);
  std::printf("%s\n", expert_plan_json(plan).dump().c_str());
}

}  // namespace

void add_eplb_plan(CLI::App& app) {
  auto opts = std::make_shared<eplb_plan_options>();
  CLI::App* cmd = app.add_subcommand(
    "eplb-plan", "Plan an expert placement from a recorded load matrix (DeepSeek's EPLB); prints JSON");
  cmd->add_option("--load", opts->load_file, "JSON [num_moe_layers][num_logical_experts] token counts")
    ->required();
  cmd->add_option("--replicas", opts->replicas, "Physical expert slots in all (a multiple of --ranks)")
    ->required();
  cmd->add_option("--groups", opts->groups, "Expert groups (hierarchical when they divide by --nodes)")
    ->capture_default_str();
  cmd->add_option("--nodes", opts->nodes, "Nodes")->capture_default_str();
  cmd->add_option("--ranks", opts->ranks, "Ranks (GPUs) in all")->capture_default_str();
  cmd->callback([opts] { run_eplb_plan(*opts); });
}

}  // namespace moe::tools
