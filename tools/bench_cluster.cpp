// tools/bench_cluster.cpp
// `moeserve bench-cluster`: numbers for the in-process cluster on a model.
//  - throughput: output tok/s at each --concurrency level (random prompts, fixed lengths);
//  - framework overhead: the share of a decode step's wall time its rank spends outside the
//    compute spans of the trace;
//  - overlap (--overlap): the link model set so one exchange costs about the compute between two
//    (calibrated from a first run), then the decode step time and the prefill time with one
//    micro-batch vs two; hidden share = (t_one - t_two) / min(compute, t_one - compute).
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "tools/cluster_client.hpp"
#include "tools/commands.hpp"
#include "tools/model_session.hpp"
#include "tools/topology_options.hpp"

namespace moe::tools {

namespace {

struct bench_options {
  session_options session;
  topology_options topology;
  std::vector<int64_t> concurrency = {1, 8, 32, 64};
  int64_t prompt_len = 64;
  int64_t output_len = 32;
  int64_t requests_per_level = 0;           // 0: 2 x concurrency
  bool overlap = false;
  uint64_t seed = 1;
};

std::vector<request_spec> random_requests(int64_t count, int64_t prompt_len, int64_t output_len, int64_t vocab,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<request_spec> specs(static_cast<size_t>(count));
  for (request_spec& s : specs) {
    s.prompt_ids.push_back(0);
    while (static_cast<int64_t>(s.prompt_ids.size()) < prompt_len)
      s.prompt_ids.push_back(static_cast<int32_t>(1 + rng() % static_cast<uint64_t>(vocab - 1)));
    s.sampling.temperature = 0.0f;
    s.sampling.max_tokens = static_cast<int32_t>(output_len);
    s.sampling.ignore_eos = true;
  }
  return specs;
}

struct level_result {
  double wall_s = 0, output_tok_s = 0, mean_ttft_s = 0, mean_tpot_s = 0;
  int64_t num_output = 0, num_decode_steps = 0;
  double decode_compute_s = 0;              // decode ranks' compute-lane time (trace), all ranks
  double decode_active_s = 0;               // decode ranks' first-to-last span time, all ranks
};

level_result run_level(const model_session& s, std::shared_ptr<const model_weights> weights,
                       const topology_config& topo, bool reference, const std::vector<request_spec>& specs,
                       int64_t concurrency) {
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  const cluster c = spawn_cluster(sys, std::move(weights), s.tok, {.topology = topo, .reference = reference, .trace = true});
  cluster_run run;
  try {
    run = run_requests(sys, c, specs, concurrency);
  } catch (...) {
    c.stop();
    throw;
  }
  level_result r{.wall_s = run.wall_s};
  int64_t n_tpot = 0;
  for (const cluster_request_result& q : run.requests) {
    const auto n = static_cast<int64_t>(q.result.output_ids.size());
    r.num_output += n;
    r.mean_ttft_s += q.ttft_s / static_cast<double>(run.requests.size());
    if (n > 1) {
      r.mean_tpot_s += (q.total_s - q.ttft_s) / static_cast<double>(n - 1);
      ++n_tpot;
    }
  }
  r.mean_tpot_s = n_tpot ? r.mean_tpot_s / static_cast<double>(n_tpot) : 0.0;
  r.output_tok_s = static_cast<double>(r.num_output) / run.wall_s;
  {
    caf::scoped_actor self{sys};
    for (const auto& rank : c.decode_ranks)
      self->request(rank, std::chrono::seconds(10), stats_atom::value)
          .receive([&](const rank_stats& st) { r.num_decode_steps = std::max(r.num_decode_steps, st.num_steps); },
                   [](caf::error&) {});
  }
  c.stop();
  const std::vector<trace_span> spans = c.trace->spans();
  for (int64_t d = 0; d < topo.decode_ranks; ++d) {
    const int64_t g = topo.prefill_ranks + d;
    auto first = std::chrono::steady_clock::time_point::max(), last = std::chrono::steady_clock::time_point::min();
    for (const trace_span& sp : spans)
      if (sp.rank == g) {
        first = std::min(first, sp.begin);
        last = std::max(last, sp.end);
      }
    if (first >= last)
      continue;
    const lane_summary sum = summarize(spans, g, first, last);
    r.decode_compute_s += sum.compute_s;
    r.decode_active_s += sum.wall_s;
  }
  return r;
}

void run(bench_options& o) {
  const topology_config topo = resolve_topology(o.topology);
  std::shared_ptr<const model_session> s = load_model(o.session, /*need_tokenizer=*/true);
  std::shared_ptr<const model_weights> weights(s, &s->weights);
  const int64_t vocab = s->weights.config.vocab_size;
  std::printf("bench-cluster: %ldP+%ldD, overlap %s, dispatch %s, link model %s, %s backend, prompt %ld, output %ld\n",
              static_cast<long>(topo.prefill_ranks), static_cast<long>(topo.decode_ranks),
              topo.two_batch_overlap ? "on" : "off", topo.dispatch_dtype.c_str(), topo.link_model ? "on" : "off",
              o.session.reference ? "reference" : "fast", static_cast<long>(o.prompt_len), static_cast<long>(o.output_len));
  if (!o.overlap) {
    std::printf("%12s %10s %12s %12s %10s %10s %12s %10s\n", "concurrency", "requests", "output tok/s", "wall s",
                "TTFT ms", "TPOT ms", "decode steps", "overhead");
    for (const int64_t conc : o.concurrency) {
      const int64_t n = o.requests_per_level ? o.requests_per_level : 2 * conc;
      const level_result r = run_level(*s, weights, topo, o.session.reference,
                                       random_requests(n, o.prompt_len, o.output_len, vocab, o.seed), conc);
      const double overhead = r.decode_active_s > 0 ? 1.0 - r.decode_compute_s / r.decode_active_s : 0.0;
      std::printf("%12ld %10ld %12.1f %12.2f %10.1f %10.1f %12ld %9.1f%%\n", static_cast<long>(conc),
                  static_cast<long>(n), r.output_tok_s, r.wall_s, 1e3 * r.mean_ttft_s, 1e3 * r.mean_tpot_s,
                  static_cast<long>(r.num_decode_steps), 100.0 * overhead);
    }
    return;
  }
  // overlap: calibrate compute per decode step and per prefill, then the link model
  const int64_t conc = o.concurrency.front();
  const auto decode_specs = random_requests(conc, 8, o.output_len, vocab, o.seed);
  const auto prefill_specs = random_requests(topo.prefill_ranks, o.prompt_len, 1, vocab, o.seed + 1);
  topology_config t = topo;
  t.link_model = false;
  t.two_batch_overlap = false;
  const level_result cal = run_level(*s, weights, t, o.session.reference, decode_specs, conc);
  const double compute_step = cal.decode_compute_s / static_cast<double>(topo.decode_ranks) /
                              static_cast<double>(std::max<int64_t>(1, cal.num_decode_steps));
  int64_t num_moe = 0;
  for (const auto& l : s->weights.layers)
    num_moe += l.is_moe;
  // each MoE layer waits for a dispatch and a combine: 2 latencies per layer ~ its compute
  const double latency_us = 1e6 * compute_step / static_cast<double>(2 * std::max<int64_t>(1, num_moe));
  t.link_model = true;
  t.intra_node = t.inter_node = {.latency_us = latency_us, .bandwidth_gb_s = 0.0};
  std::printf("calibration: decode compute %.2f ms/step over %ld MoE layers -> link latency %.0f us per message\n",
              1e3 * compute_step, static_cast<long>(num_moe), latency_us);
  double step[2] = {0, 0}, prefill[2] = {0, 0};
  for (int mb = 0; mb < 2; ++mb) {
    t.two_batch_overlap = mb == 1;
    step[mb] = run_level(*s, weights, t, o.session.reference, decode_specs, conc).mean_tpot_s;
    prefill[mb] = run_level(*s, weights, t, o.session.reference, prefill_specs,
                            static_cast<int64_t>(prefill_specs.size())).mean_ttft_s;
  }
  // prefill compute: the same prompts with the link model off
  t.link_model = false;
  t.two_batch_overlap = false;
  const double prefill_compute =
      run_level(*s, weights, t, o.session.reference, prefill_specs, static_cast<int64_t>(prefill_specs.size())).mean_ttft_s;
  auto hidden = [](double one, double two, double compute) {
    const double comm = std::max(0.0, one - compute);
    const double denom = std::min(compute, comm);
    return denom > 0 ? (one - two) / denom : 0.0;
  };
  std::printf("%8s %14s %14s %14s %10s\n", "phase", "1 micro-batch", "2 micro-batches", "compute only", "hidden");
  std::printf("%8s %11.2f ms %12.2f ms %11.2f ms %9.1f%%\n", "decode", 1e3 * step[0], 1e3 * step[1], 1e3 * compute_step,
              100.0 * hidden(step[0], step[1], compute_step));
  std::printf("%8s %11.2f ms %12.2f ms %11.2f ms %9.1f%%\n", "prefill", 1e3 * prefill[0], 1e3 * prefill[1],
              1e3 * prefill_compute, 100.0 * hidden(prefill[0], prefill[1], prefill_compute));
}

}  // namespace

void add_bench_cluster(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  CLI::App* cmd = app.add_subcommand("bench-cluster", "throughput, framework overhead and overlap of the in-process cluster");
  add_session_options(*cmd, o->session, /*reference_by_default=*/false, /*kv_flags=*/false);
  add_topology_options(*cmd, o->topology);
  cmd->add_option("--concurrency", o->concurrency, "concurrent requests per level (overlap: the first)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--prompt-len", o->prompt_len, "prompt tokens per request")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--output-len", o->output_len, "output tokens per request")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--requests", o->requests_per_level, "requests per level (0: twice the concurrency)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_flag("--overlap", o->overlap, "measure how much communication two micro-batches hide");
  cmd->add_option("--seed", o->seed, "prompt RNG seed");
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
