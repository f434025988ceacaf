// tools/bench_cluster.cpp
// `moeserve bench-cluster`: numbers for the in-process cluster on a model.
//  - throughput: output tok/s at each --concurrency level (random prompts, fixed lengths), and
//    with --single-rank the same levels through one model_runner (the "1 rank" baseline);
//  - framework overhead: the share of wall time the busiest decode rank spends outside the
//    compute spans of the trace while it decodes (waits for peers included);
//  - overlap (--overlap): decode step time (TPOT) and prefill time (TTFT) with one and two
//    micro-batches, with the link model off (compute) and set so one step's communication is
//    about the compute it can overlap: the MoE layers' stages with two micro-batches (LOGITS
//    waits for the last combine and the dense layers exchange nothing, in any schedule);
//    calibrated from traced runs (compute: the median of three).
//    comm = t(link, 1 mb) - t(no link, 1 mb), hidden = (compute_2mb + comm - t(link, 2 mb)) /
//    min(compute_2mb, comm), per round of the four runs (rounds where noise puts it outside [0, 1]
//    are left out and counted); in-trace: per rank of the phase, |compute ∩ comm| / min(|compute|,
//    |comm|) within each +link run (comm = its messages on the link); hidden (waits): the same as
//    hidden from each run's waits (step time outside compute spans, mean over the phase's ranks),
//    1 - (w(link, 2 mb) - w(2 mb)) / (w(link, 1 mb) - w(1 mb)), free of the run-to-run compute
//    speed. Times come from the trace: the median decode step of the busiest decode rank, the
//    longest prefill step. Every figure is the
//    median over --repeat rounds of the four configurations.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>

#include "actors/system_config.hpp"
#include "tools/cluster_client.hpp"
#include "tools/commands.hpp"
#include "tools/model_session.hpp"
#include "tools/single_rank.hpp"
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
  bool single_rank = false;                 // also the "1 rank" baseline (tools/single_rank.hpp)
  int64_t repeat = 1;
  uint64_t seed = 1;
  std::string trace_file;                   // the last run's Chrome trace (overlap: one per phase)
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
  double busiest_compute_s = 0, busiest_active_s = 0;   // the decode rank with the most compute
  std::map<std::string, double> busiest_stage_s;          // its compute by stage name
  double max_decode_comm_s = 0, max_prefill_comm_s = 0;   // comm lane (link model), busiest rank
  double max_decode_moe_s = 0, max_prefill_moe_s = 0;     // compute in MoE layers, busiest rank
  double decode_overlap = 0, prefill_overlap = 0;        // mean over ranks: |compute ∩ comm| / min(|compute|, |comm|)
  double decode_step_s = 0;                 // median decode step of the busiest rank (trace)
  // per decode step, median over steps, busiest rank: compute in MoE layers, link-busy time
  double decode_moe_step_s = 0, decode_comm_step_s = 0;
  double prefill_step_s = 0;                // longest prefill step (first span to LOGITS, trace)
  // mean over the phase's ranks of a step's time outside its compute spans (waits for payloads,
  // peers, the next step): per rank the longest prefill step's, the median decode step's
  double prefill_wait_s = 0, decode_wait_s = 0;
};

double median(std::vector<double> v) {
  if (v.empty())
    return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The layer of a compute span named "<STAGE> mb<m> L<layer>"; -1 for LOGITS and unnamed ones.
int64_t layer_of(const trace_span& sp) {
  if (sp.name.starts_with("LOGITS"))
    return -1;
  const size_t at = sp.name.rfind(" L");
  return at == std::string::npos ? -1 : std::stoll(sp.name.substr(at + 2));
}

// Output tok/s, mean TTFT and mean TPOT ((total - TTFT) / (outputs - 1), requests with 2+ outputs).
void time_requests(const cluster_run& run, level_result& r) {
  r.wall_s = run.wall_s;
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
}

level_result run_level(const model_session& s, const std::shared_ptr<const model_weights>& weights,
                       const topology_config& topo, bool reference, const std::vector<request_spec>& specs,
                       int64_t concurrency, const std::string& trace_file) {
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  const cluster c = spawn_cluster(sys, std::move(weights), s.tok, {.topology = topo, .reference = reference, .trace = true});
  cluster_run run;
  try {
    run = run_requests(sys, c, specs, concurrency);
  } catch (...) {
    c.stop();
    throw;
  }
  level_result r;
  time_requests(run, r);
  {
    caf::scoped_actor self{sys};
    for (const auto& rank : c.decode_ranks)
      self->request(rank, std::chrono::seconds(10), stats_atom::value)
          .receive([&](const rank_stats& st) { r.num_decode_steps = std::max(r.num_decode_steps, st.num_steps); },
                   [](caf::error&) {});
  }
  c.stop();
  if (!trace_file.empty())
    c.trace->write_json(trace_file);
  const std::vector<trace_span> spans = c.trace->spans();
  const auto all = std::chrono::steady_clock::time_point::min(), end = std::chrono::steady_clock::time_point::max();
  const model_config& mc = s.weights.config;
  for (int64_t g = 0; g < topo.prefill_ranks + topo.decode_ranks; ++g) {
    const lane_summary lanes = summarize(spans, g, all, end);
    double& into = g < topo.prefill_ranks ? r.max_prefill_comm_s : r.max_decode_comm_s;
    into = std::max(into, lanes.comm_s);
    if (const double m = std::min(lanes.compute_s, lanes.comm_s); m > 0)
      (g < topo.prefill_ranks ? r.prefill_overlap : r.decode_overlap) +=
          lanes.overlap_s / m / static_cast<double>(g < topo.prefill_ranks ? topo.prefill_ranks : topo.decode_ranks);
    double moe_s = 0;
    for (const trace_span& sp : spans)
      if (sp.rank == g && sp.lane == trace_lane::compute && layer_of(sp) >= 0 && mc.is_moe_layer(layer_of(sp)))
        moe_s += std::chrono::duration<double>(sp.end - sp.begin).count();
    double& moe_into = g < topo.prefill_ranks ? r.max_prefill_moe_s : r.max_decode_moe_s;
    moe_into = std::max(moe_into, moe_s);
    // steps end with LOGITS: a decode step is the time between two LOGITS ends (the wait for
    // the next step included); a prefill step runs from its first span to its LOGITS end
    std::vector<trace_span> own;
    for (const trace_span& sp : spans)
      if (sp.rank == g && sp.lane == trace_lane::compute)
        own.push_back(sp);
    std::sort(own.begin(), own.end(), [](const trace_span& a, const trace_span& b) { return a.begin < b.begin; });
    std::vector<double> steps, step_moe, step_comm, step_wait;
    auto step_begin = std::chrono::steady_clock::time_point::min();
    double moe_in_step = 0, compute_in_step = 0;
    for (const trace_span& sp : own) {
      if (step_begin == std::chrono::steady_clock::time_point::min())
        step_begin = sp.begin;
      const double span_s = std::chrono::duration<double>(sp.end - sp.begin).count();
      compute_in_step += span_s;
      if (layer_of(sp) >= 0 && mc.is_moe_layer(layer_of(sp)))
        moe_in_step += span_s;
      if (!sp.name.starts_with("LOGITS"))
        continue;
      steps.push_back(std::chrono::duration<double>(sp.end - step_begin).count());
      step_moe.push_back(moe_in_step);
      step_comm.push_back(summarize(spans, g, step_begin, sp.end).comm_s);
      step_wait.push_back(steps.back() - compute_in_step);
      moe_in_step = compute_in_step = 0;
      step_begin = g < topo.prefill_ranks ? std::chrono::steady_clock::time_point::min() : sp.end;
    }
    if (g < topo.prefill_ranks) {
      if (!steps.empty()) {
        const auto longest = static_cast<size_t>(std::max_element(steps.begin(), steps.end()) - steps.begin());
        r.prefill_step_s = std::max(r.prefill_step_s, steps[longest]);
        r.prefill_wait_s += step_wait[longest] / static_cast<double>(topo.prefill_ranks);
      }
    } else if (!steps.empty()) {
      r.decode_wait_s += median(step_wait) / static_cast<double>(topo.decode_ranks);
      r.decode_step_s = std::max(r.decode_step_s, median(steps));
      r.decode_moe_step_s = std::max(r.decode_moe_step_s, median(step_moe));
      r.decode_comm_step_s = std::max(r.decode_comm_step_s, median(step_comm));
    }
  }
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
    if (sum.compute_s > r.busiest_compute_s) {              // the rank with the most work
      r.busiest_compute_s = sum.compute_s;
      r.busiest_active_s = sum.wall_s;
      r.busiest_stage_s.clear();
      for (const trace_span& sp : spans)
        if (sp.rank == g && sp.lane == trace_lane::compute)
          r.busiest_stage_s[sp.name.substr(0, sp.name.find(' '))] +=
              std::chrono::duration<double>(sp.end - sp.begin).count();
    }
  }
  return r;
}

// The same levels through one model_runner on the session's threads (no ranks, no actors).
void run_single_rank_levels(const bench_options& o, const model_session& s) {
  const model_config& cfg = s.weights.config;
  const std::unique_ptr<backend> device = make_cpu_backend(o.session.reference, o.session.threads);
  const int64_t max_conc = *std::max_element(o.concurrency.begin(), o.concurrency.end());
  const int64_t block = 64, per_request = (o.prompt_len + o.output_len + block - 1) / block;
  kv_cache cache(cfg.num_hidden_layers, max_conc * per_request, block, cfg.kv_cache_dim());
  forward_options fwd;
  fwd.ep = o.session.ep;
  model_runner runner(s.weights, *device, cache, fwd);
  const single_rank_options base;
  const std::string threads = o.session.threads > 0 ? std::to_string(o.session.threads) + " threads" : "all cores";
  std::printf("1 rank: one model_runner on %s (%s backend), continuous batching, %ld tokens per forward call:\n",
              threads.c_str(), std::string(device->name()).c_str(), static_cast<long>(base.token_budget));
  std::printf("%12s %10s %12s %12s %10s %10s\n", "concurrency", "requests", "output tok/s", "wall s", "TTFT ms",
              "TPOT ms");
  for (const int64_t conc : o.concurrency) {
    const int64_t n = o.requests_per_level ? o.requests_per_level : 2 * conc;
    const cluster_run run = run_single_rank(
        runner, random_requests(n, o.prompt_len, o.output_len, cfg.vocab_size, o.seed), {.concurrency = conc});
    level_result r;
    time_requests(run, r);
    std::printf("%12ld %10ld %12.1f %12.2f %10.1f %10.1f\n", static_cast<long>(conc), static_cast<long>(n),
                r.output_tok_s, r.wall_s, 1e3 * r.mean_ttft_s, 1e3 * r.mean_tpot_s);
  }
}

void run(bench_options& o) {
  const topology_config topo = resolve_topology(o.topology);
  if (const std::filesystem::path dir = std::filesystem::path(o.trace_file).parent_path();
      !o.trace_file.empty() && !dir.empty() && !std::filesystem::is_directory(dir))   // not minutes later
    throw input_error("--trace: no directory " + dir.string() + " to write " + o.trace_file + " into");
  std::shared_ptr<const model_session> s = load_model(o.session, /*need_tokenizer=*/true);
  std::shared_ptr<const model_weights> weights(s, &s->weights);
  const int64_t vocab = s->weights.config.vocab_size;
  std::printf("bench-cluster: %ldP+%ldD, overlap %s, dispatch %s, combine %s, link model %s, %s backend, prompt %ld, output %ld\n",
              static_cast<long>(topo.prefill_ranks), static_cast<long>(topo.decode_ranks),
              topo.two_batch_overlap ? "on" : "off", topo.dispatch_dtype.c_str(), topo.combine.c_str(),
              topo.link_model ? "on" : "off",
              o.session.reference ? "reference" : "fast", static_cast<long>(o.prompt_len), static_cast<long>(o.output_len));
  if (!o.overlap) {
    std::printf("%12s %10s %12s %12s %10s %10s %12s %10s\n", "concurrency", "requests", "output tok/s", "wall s",
                "TTFT ms", "TPOT ms", "decode steps", "overhead");
    std::vector<level_result> breakdowns;
    for (const int64_t conc : o.concurrency) {
      const int64_t n = o.requests_per_level ? o.requests_per_level : 2 * conc;
      const level_result r = run_level(*s, weights, topo, o.session.reference,
                                       random_requests(n, o.prompt_len, o.output_len, vocab, o.seed), conc,
                                       o.trace_file);
      const double overhead = r.busiest_active_s > 0 ? 1.0 - r.busiest_compute_s / r.busiest_active_s : 0.0;
      std::printf("%12ld %10ld %12.1f %12.2f %10.1f %10.1f %12ld %9.1f%%\n", static_cast<long>(conc),
                  static_cast<long>(n), r.output_tok_s, r.wall_s, 1e3 * r.mean_ttft_s, 1e3 * r.mean_tpot_s,
                  static_cast<long>(r.num_decode_steps), 100.0 * overhead);
      breakdowns.push_back(r);
    }
    std::printf("step-time breakdown of the busiest decode rank (trace compute spans), ms per decode step; "
                "outside = waits for peers and framework:\n%12s", "concurrency");
    for (const char* stage : {"ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS", "SAMPLE", "outside"})
      std::printf(" %8s", stage);
    std::printf("\n");
    for (size_t i = 0; i < breakdowns.size(); ++i) {
      const level_result& r = breakdowns[i];
      const double steps = static_cast<double>(std::max<int64_t>(1, r.num_decode_steps));
      std::printf("%12ld", static_cast<long>(o.concurrency[i]));
      for (const char* stage : {"ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS", "SAMPLE"}) {
        const auto it = r.busiest_stage_s.find(stage);
        std::printf(" %8.2f", it == r.busiest_stage_s.end() ? 0.0 : 1e3 * it->second / steps);
      }
      std::printf(" %8.2f\n", 1e3 * (r.busiest_active_s - r.busiest_compute_s) / steps);
    }
    if (o.single_rank)
      run_single_rank_levels(o, *s);
    return;
  }
  // overlap: compute alone (link model off) with one and two micro-batches, and with the link
  // model set so a step's communication is about the compute it can hide under
  const int64_t conc = o.concurrency.front();
  const auto decode_specs = random_requests(conc, 8, o.output_len, vocab, o.seed);
  const auto prefill_specs = random_requests(topo.prefill_ranks, o.prompt_len, 1, vocab, o.seed + 1);
  const auto num_prefill = static_cast<int64_t>(prefill_specs.size());
  topology_config t = topo;
  // The link: bandwidth-bound, as DeepEP's normal kernels are (a small fixed latency), so a
  // micro-batch's messages take half as long as the whole batch's.
  link_spec link[2] = {{.latency_us = 20.0, .bandwidth_gb_s = 1.0}, {.latency_us = 20.0, .bandwidth_gb_s = 1.0}};
  // the trace of the last +link two-micro-batch run of each phase: FILE with .decode / .prefill
  // before its extension
  std::string trace_of[2];                  // decode, prefill
  if (!o.trace_file.empty())
    for (int phase = 0; phase < 2; ++phase) {
      std::filesystem::path f = o.trace_file;
      const std::string ext = f.extension().string();
      trace_of[phase] = f.replace_extension((phase == 0 ? ".decode" : ".prefill") + ext).string();
    }
  auto once = [&](bool decode, bool on, bool two) {
    t.link_model = on;
    t.two_batch_overlap = two;
    t.intra_node = t.inter_node = link[decode ? 0 : 1];
    const std::string trace = on && two ? trace_of[decode ? 0 : 1] : std::string();
    return decode ? run_level(*s, weights, t, o.session.reference, decode_specs, conc, trace)
                  : run_level(*s, weights, t, o.session.reference, prefill_specs, num_prefill, trace);
  };
  // warm-up: the first touch of mmapped weights is many times slower than the steady state
  (void)once(true, false, false);
  (void)once(false, false, false);
  // calibrate: transfer time scales as 1 / bandwidth, so the traced comm time of one probe at
  // 1 GB/s gives the bandwidth at which a step's communication takes as long as the compute that
  // is to hide it: the MoE layers' stages with two micro-batches (traced without the link)
  // Decode takes the median step, as the figures below do: a run's first steps decode the few
  // requests whose prompts were done first, and such steps read all the weights for little
  // communication, so a mean over all steps set the link ~20 % slower than compute for the
  // steps that are measured.
  // The compute is the median of three runs: one run's compute can be 25 % off the VM's usual
  // (a prefill's MoE stages took 1692 ms in one calibration run against 1222-1424 in others), and
  // the link it sets holds for every round. The probe's comm is bytes at a fixed rate.
  std::vector<double> moe_runs[2];          // decode, prefill
  for (int i = 0; i < 3; ++i) {
    moe_runs[0].push_back(once(true, false, true).decode_moe_step_s);
    moe_runs[1].push_back(once(false, false, true).max_prefill_moe_s);
  }
  link[0] = link[1] = {.latency_us = 0.0, .bandwidth_gb_s = 1.0};
  const level_result probe_d = once(true, true, false), probe_p = once(false, true, false);
  const double moe_decode = std::max(1e-9, median(moe_runs[0]));    // a run with no MoE work
  const double moe_prefill = std::max(1e-9, median(moe_runs[1]));   // still gets a finite link
  link[0] = {.latency_us = 20.0, .bandwidth_gb_s = std::max(1e-4, probe_d.decode_comm_step_s / moe_decode)};
  link[1] = {.latency_us = 20.0, .bandwidth_gb_s = std::max(1e-4, probe_p.max_prefill_comm_s / moe_prefill)};
  std::printf("MoE-layer compute per step, two micro-batches: decode %.2f ms, prefill %.2f ms; "
              "the rest is dense layers and LOGITS\n",
              1e3 * moe_decode, 1e3 * moe_prefill);
  std::printf("link model: %.0f us + bytes at %.3f GB/s in decode, %.3f GB/s in prefill (comm ~ MoE compute)\n",
              link[0].latency_us, link[0].bandwidth_gb_s, link[1].bandwidth_gb_s);
  std::fflush(stdout);                      // the rounds take minutes: show the link they run on
  // Rounds: every configuration once per round, so that a slow phase of the VM (run-to-run
  // differences of 20-40 % on two cores) falls on all four alike; figures are medians over rounds.
  struct phase_runs {
    std::vector<double> time[2][2];         // [link model][micro-batches - 1]: step time per round
    std::vector<double> in_trace[2];        // [micro-batches - 1], +link runs
    std::vector<double> hidden;             // per round, where the noise left it in [0, 1]
    std::vector<double> hidden_waits;       // per round, from the waits (see below)
  } phases[2];                              // decode, prefill
  for (int64_t round = 0; round < o.repeat; ++round)
    for (int phase = 0; phase < 2; ++phase) {
      const bool decode = phase == 0;
      phase_runs& pr = phases[phase];
      double x[2][2], w[2][2];
      for (int on = 0; on < 2; ++on)
        for (int mb = 0; mb < 2; ++mb) {
          const level_result r = once(decode, on == 1, mb == 1);
          x[on][mb] = decode ? r.decode_step_s : r.prefill_step_s;
          w[on][mb] = decode ? r.decode_wait_s : r.prefill_wait_s;
          pr.time[on][mb].push_back(x[on][mb]);
          if (on == 1)
            pr.in_trace[mb].push_back(decode ? r.decode_overlap : r.prefill_overlap);
        }
      // comm = what the link model adds to one micro-batch; hidden = the part of min(compute,
      // comm) that two micro-batches take off their own compute + comm
      const double comm = x[1][0] - x[0][0], compute = x[0][1];
      const double share = std::min(compute, comm) > 0 ? (compute + comm - x[1][1]) / std::min(compute, comm) : -1.0;
      if (share >= 0.0 && share <= 1.0)
        pr.hidden.push_back(share);
      // the same figure from each run's waits (step time outside compute spans): a run's compute
      // time drops out, so the VM's speed from run to run does not count, only what the link
      // adds to the waits: 1 - (w(link, 2 mb) - w(2 mb)) / (w(link, 1 mb) - w(1 mb))
      if (const double exposed_1mb = w[1][0] - w[0][0]; exposed_1mb > 0)
        pr.hidden_waits.push_back(1.0 - (w[1][1] - w[0][1]) / exposed_1mb);
    }
  // in the trace: the share of min(compute, comm) during which a rank both computes and has a
  // message on its link, in the +link runs (within one run: no cross-run noise)
  std::printf("medians of %ld rounds\n", static_cast<long>(o.repeat));
  std::printf("%8s %12s %12s %12s %12s %14s %13s %13s %14s\n", "phase", "compute 1mb", "compute 2mb", "+link 1mb",
              "+link 2mb", "hidden", "in-trace 1mb", "in-trace 2mb", "hidden (waits)");
  for (int phase = 0; phase < 2; ++phase) {
    const phase_runs& pr = phases[phase];
    char hidden_text[32] = "n/a";           // no round where the noise left the share in [0, 1]
    if (!pr.hidden.empty())
      std::snprintf(hidden_text, sizeof hidden_text, "%.1f%% (%zu/%ld)", 100.0 * median(pr.hidden), pr.hidden.size(),
                    static_cast<long>(o.repeat));
    char waits_text[16] = "n/a";            // no round where the link added to one micro-batch's waits
    if (!pr.hidden_waits.empty())
      std::snprintf(waits_text, sizeof waits_text, "%.1f%%", 100.0 * median(pr.hidden_waits));
    std::printf("%8s %9.2f ms %9.2f ms %9.2f ms %9.2f ms %14s %12.1f%% %12.1f%% %14s\n",
                phase == 0 ? "decode" : "prefill", 1e3 * median(pr.time[0][0]), 1e3 * median(pr.time[0][1]),
                1e3 * median(pr.time[1][0]), 1e3 * median(pr.time[1][1]), hidden_text,
                100.0 * median(pr.in_trace[0]), 100.0 * median(pr.in_trace[1]), waits_text);
  }
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
  cmd->add_flag("--single-rank", o->single_rank,
                "also run each level through one model_runner on --threads (the \"1 rank\" baseline: no ranks, "
                "continuous batching)");
  cmd->add_option("--repeat", o->repeat,
                  "overlap: rounds of every configuration; each figure is the median over rounds (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{20}));
  cmd->add_option("--seed", o->seed, "prompt RNG seed");
  cmd->add_option("--trace", o->trace_file,
                  "write the last run's Chrome trace (JSON) to this file (--overlap: the last +link two-micro-batch "
                  "runs, to FILE with .decode / .prefill before its extension)");
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
