// tools/chaos.cpp
// `moeserve chaos`: serves a model in-process with --fault-injection on a loopback ephemeral
// port, runs a bounded greedy load through the wire without faults and again while killing
// random actors (tools/chaos_run.hpp), and prints per kind the kills and recovery times, then
// the totals. Exit 1 when any request was lost, failed with anything but a retryable 503 (or
// failed at all without faults), any stream was broken, any greedy output differs, or KV or a
// running slot stays in use.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>

#include "actors/cluster.hpp"
#include "actors/system_config.hpp"
#include "net/rpc_server.hpp"
#include "tools/chaos_run.hpp"
#include "tools/commands.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/lib/running_cluster.hpp"
#include "tools/lib/topology_options.hpp"

namespace moe::tools {

namespace {

struct chaos_cli {
  std::string model_dir;
  topology_options topology;
  bool reference = false;
  weight_options weights;
  chaos_options run;
  std::string kinds;  // comma-separated; empty: every kind
};

// The kinds a kill of which the cluster recovers from: every kind admin.kill takes.
std::vector<std::string> restartable_kinds() {
  return {"request_queue", "prefill_balancer", "decode_balancer", "expert_balancer",  "prefill_rank",
          "decode_rank",   "session",          "stats_sampler",   "connection_bridge"};
}

std::vector<std::string> parse_kinds(const std::string& list) {
  std::vector<std::string> allowed = restartable_kinds();
  if (list.empty())
    return allowed;
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string k; std::getline(in, k, ',');) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string names;
      for (const std::string& a : allowed) {
        if (!names.empty())
          names += ", ";
        names += a;
      }
      std::string message = "--kinds: ";
      message += k;
      message += " is not a kind of actor (";
      message += names;
      message += ")";
      throw input_error(message);
    }
    out.push_back(k);
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty())
    return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))];
}

void print_pass(const char* name, const pass_report& p) {
  std::string failed;
  for (const auto& [code, n] : p.failed_by_code)
    failed += " " + std::to_string(code) + ":" + std::to_string(n);
  std::printf("%-9s sent %lld, completed %lld, failed%s, retried %lld, %.1f output tok/s over %.2f s\n", name,
              static_cast<long long>(p.sent), static_cast<long long>(p.completed),
              failed.empty() ? " 0" : failed.c_str(), static_cast<long long>(p.retried),
              p.wall_s > 0 ? p.output_tokens / p.wall_s : 0.0, p.wall_s);
}

int run(chaos_cli& o) {
  const topology_config topo = resolve_topology(o.topology);
  o.run.kinds = parse_kinds(o.kinds);
  auto [weights, tok] = load_for_serving(o.model_dir, topo, o.weights, o.reference, "chaos");
  running_cluster running(weights, tok, {.topology = topo, .reference = o.reference});
  caf::actor_system& sys = running.system();
  const cluster& c = running.handles();
  std::random_device entropy;
  const std::string admin_key = "chaos-" + std::to_string(entropy()) + std::to_string(entropy());
  chaos_report rep;
  {
    net::rpc_server server(sys,
                           net::serving_target{.handles = c,
                                               .tok = tok,
                                               .vocab_size = weights->config.vocab_size,
                                               .max_context = static_cast<size_t>(served_context(
                                                 topo, weights->config.max_position_embeddings)),
                                               .model_name = "chaos"},
                           {.host = "127.0.0.1",
                            .port = 0,
                            .keys = {.api_key = {}, .admin_key = admin_key},
                            .fault_injection = true});
    std::printf(
      "moeserve chaos: %lld requests (%d tokens each, %lld in flight) on %lld prefill + %lld decode "
      "ranks, %lld kills about every %.2f s\n",
      static_cast<long long>(o.run.num_requests), o.run.max_tokens, static_cast<long long>(o.run.concurrency),
      static_cast<long long>(topo.prefill_ranks), static_cast<long long>(topo.decode_ranks),
      static_cast<long long>(o.run.num_kills), o.run.interval_s);
    std::fflush(stdout);
    rep = run_chaos(server.port(), admin_key, weights->config.vocab_size, o.run);
    server.stop();
  }
  std::printf("%-16s %6s %10s %12s %9s\n", "kind", "kills", "recovered", "median ms", "max ms");
  for (const auto& [kind, k] : rep.kinds)
    std::printf("%-16s %6lld %10zu %12.1f %9.1f\n", kind.c_str(), static_cast<long long>(k.kills),
                k.recovery_s.size(), 1000.0 * percentile(k.recovery_s, 0.5),
                1000.0 *
                  (k.recovery_s.empty() ? 0.0 : *std::max_element(k.recovery_s.begin(), k.recovery_s.end())));
  print_pass("no faults", rep.reference);
  print_pass("kills", rep.chaos);
  std::printf(
    "resumed %lld, placed again %lld, preempted %lld, tokens re-prefilled %lld; lost %lld, broken streams "
    "%lld, greedy mismatches %lld, KV blocks leaked %lld, running slots left %lld\n",
    static_cast<long long>(rep.resumed), static_cast<long long>(rep.migrations),
    static_cast<long long>(rep.preemptions), static_cast<long long>(rep.reprefilled_tokens),
    static_cast<long long>(rep.chaos.lost), static_cast<long long>(rep.chaos.bad_streams),
    static_cast<long long>(rep.chaos.mismatches), static_cast<long long>(rep.leaked_blocks),
    static_cast<long long>(rep.running_left));
  const bool clean = rep.chaos.lost == 0 && rep.chaos.failed_not_503() == 0 && rep.chaos.bad_streams == 0 &&
                     rep.chaos.mismatches == 0 && rep.leaked_blocks == 0 && rep.running_left == 0 &&
                     rep.reference.completed == rep.reference.sent && rep.reference.bad_streams == 0;
  return clean ? 0 : 1;
}

}  // namespace

void add_chaos(CLI::App& app) {
  auto o = std::make_shared<chaos_cli>();
  CLI::App* cmd = app.add_subcommand(
    "chaos", "serve a model with fault injection and check that a greedy load survives random actor kills");
  cmd
    ->add_option("--model", o->model_dir, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")
    ->required();
  add_topology_options(*cmd, o->topology);
  cmd->add_flag("--reference", o->reference, "run the plain-loop CPU reference backend on every rank");
  add_weight_options(*cmd, o->weights);
  cmd->add_option("--requests", o->run.num_requests, "generates per pass (default 200)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--concurrency", o->run.concurrency, "generates in flight (default 16; at most 64)")
    ->check(CLI::Range(int64_t{1}, int64_t{64}));
  cmd->add_option("--max-tokens", o->run.max_tokens, "tokens per generate (default 16)")
    ->check(CLI::Range(1, 1 << 15));
  cmd->add_option("--prompt-len", o->run.prompt_len, "random prompt tokens per generate (default 8)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 15));
  cmd->add_option("--kills", o->run.num_kills, "kills during the second pass at most (default 20)")
    ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--kinds", o->kinds,
                  "comma-separated kinds to kill (default: every kind: request_queue, prefill_balancer, "
                  "decode_balancer, expert_balancer, prefill_rank, decode_rank, session, stats_sampler, "
                  "connection_bridge)");
  cmd->add_option("--interval", o->run.interval_s, "mean seconds between kills (default 0.3)")
    ->check(CLI::Range(0.001, 3600.0));
  cmd->add_option("--seed", o->run.seed, "prompts and kills (default 1)");
  cmd->callback([o] {
    if (run(*o) != 0)  // exit status 1
      throw std::runtime_error("chaos: the load did not survive the kills intact (see the totals)");
  });
}

}  // namespace moe::tools
