// tools/bench_cluster.cpp
// `moeserve bench-cluster`: numbers for the in-process cluster on a model.
//  - throughput: output tok/s at each --concurrency level (random prompts, fixed lengths), and
//    with --single-rank the same levels through one model_runner (the "1 rank" baseline);
//  - framework overhead: the share of wall time the busiest decode rank spends outside the
//    compute spans of the trace while it decodes (waits for peers included);
//  - overlap (--overlap): decode and prefill steps with one and two micro-batches, with the link
//    model set so one step's communication is about the compute it can overlap: the MoE layers'
//    stages with two micro-batches (LOGITS waits for the last combine and the dense layers
//    exchange nothing, in any schedule); calibrated from traced runs without the link (the
//    median of three). Each round runs each phase with one and with two micro-batches, the link
//    on every other step only, and each step on the link gives the share of min(MoE compute,
//    comm) hidden (tools/overlap_share.hpp): comm = its link-busy time, what the link exposed =
//    its time (or its waits outside compute spans) minus its neighbours' off the link. In-trace:
//    the share of link-busy time under compute in the steps on the link. Times come from the
//    trace, per step; shares are medians over all such steps of --repeat rounds.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <numeric>
#include <string>

#include "actors/system_config.hpp"
#include "tools/cli_checks.hpp"
#include "tools/lib/cluster_client.hpp"
#include "tools/commands.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/overlap_share.hpp"
#include "tools/lib/single_rank.hpp"
#include "tools/lib/topology_options.hpp"

namespace moe::tools {

namespace {

struct bench_options {
  session_options session;
  topology_options topology;
  std::vector<int64_t> concurrency = {1, 8, 32, 64};
  int64_t prompt_len = 64;
  int64_t output_len = 32;
  int64_t requests_per_level = 0;  // 0: 2 x concurrency
  bool overlap = false;
  bool single_rank = false;  // also the "1 rank" baseline (tools/lib/single_rank.hpp)
  int64_t repeat = 1;
  uint64_t seed = 1;
  std::string trace_file;  // the last run's Chrome trace (overlap: one per phase)
};

struct level_result {
  double wall_s = 0, output_tok_s = 0, mean_ttft_s = 0, mean_tpot_s = 0;
  int64_t num_output = 0, num_decode_steps = 0;
  double decode_compute_s = 0;                         // decode ranks' compute-lane time (trace), all ranks
  double decode_active_s = 0;                          // decode ranks' first-to-last span time, all ranks
  double busiest_compute_s = 0, busiest_active_s = 0;  // the decode rank with the most compute
  std::map<std::string, double> busiest_stage_s;       // its compute by stage name
  // A phase's step from the trace: decode the median step (each figure's median over steps),
  // prefill the median step (one per wave), whole; times the busiest rank's, `wait_s` the mean
  // over ranks (the overlap's calibration reads moe_s and comm_s).
  struct phase_step {
    double step_s = 0;              // decode: LOGITS end to LOGITS end; prefill: first span to LOGITS end
    double moe_s = 0;               // compute in the MoE layers' stages
    double comm_s = 0;              // the link's busy time (this rank's sends)
    double wait_s = 0;              // step time outside compute spans (payloads, peers, next step)
    double busy_s = 0, both_s = 0;  // one step: compute spans' union, its overlap with comm
  } decode, prefill;
  // every step of every rank of the phase, in step order (an overlap run pairs neighbours)
  std::vector<std::vector<phase_step>> decode_steps, prefill_steps;
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

// Runs each wave of requests through one cluster in turn (the next when the last is done);
// the request figures cover them all, the trace figures per step (see phase_step).
level_result run_level(const model_session& s, const std::shared_ptr<const model_weights>& weights,
                       const topology_config& topo, bool reference,
                       const std::vector<std::vector<request_spec>>& waves, int64_t concurrency,
                       const std::string& trace_file, bool link_even_steps_only = false) {
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  const cluster c = spawn_cluster(
    sys, weights, s.tok,
    {.topology = topo, .reference = reference, .trace = true, .link_even_steps_only = link_even_steps_only});
  cluster_run run;
  try {
    for (const std::vector<request_spec>& specs : waves) {
      cluster_run wave = run_requests(sys, c, specs, concurrency);
      run.requests.insert(run.requests.end(), wave.requests.begin(), wave.requests.end());
      run.wall_s += wave.wall_s;
    }
    for (const cluster_request_result& q : run.requests)  // a failed request has no figures
      if (q.result.reason == finish_reason::error)
        throw input_error("bench-cluster: a request failed (" + q.result.error +
                          "); check --prompt-len, --output-len and the topology's --max-context");
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
        .receive(
          [&](const rank_stats& st) { r.num_decode_steps = std::max(r.num_decode_steps, st.num_steps); },
          [](caf::error&) {});
  }
  c.stop();
  if (!trace_file.empty())
    c.trace->write_json(trace_file);
  const std::vector<trace_span> spans = c.trace->spans();
  const model_config& mc = s.weights.config;
  for (int64_t g = 0; g < topo.prefill_ranks + topo.decode_ranks; ++g) {
    const bool prefill = g < topo.prefill_ranks;
    // steps end with LOGITS: a decode step is the time between two LOGITS ends (the wait for
    // the next step included); a prefill step runs from its first span to its LOGITS end
    std::vector<trace_span> own;
    for (const trace_span& sp : spans)
      if (sp.rank == g && sp.lane == trace_lane::compute)
        own.push_back(sp);
    std::sort(own.begin(), own.end(),
              [](const trace_span& a, const trace_span& b) { return a.begin < b.begin; });
    std::vector<level_result::phase_step> steps;
    auto step_begin = std::chrono::steady_clock::time_point::min();
    double moe_in_step = 0, compute_in_step = 0;  // a stream's spans do not overlap
    for (const trace_span& sp : own) {
      if (step_begin == std::chrono::steady_clock::time_point::min())
        step_begin = sp.begin;
      const double span_s = std::chrono::duration<double>(sp.end - sp.begin).count();
      compute_in_step += span_s;
      if (layer_of(sp) >= 0 && mc.is_moe_layer(layer_of(sp)))
        moe_in_step += span_s;
      if (!sp.name.starts_with("LOGITS"))
        continue;
      const double step_s = std::chrono::duration<double>(sp.end - step_begin).count();
      const lane_summary in_step = summarize(spans, g, step_begin, sp.end);
      steps.push_back({.step_s = step_s,
                       .moe_s = moe_in_step,
                       .comm_s = in_step.comm_s,
                       .wait_s = step_s - compute_in_step,
                       .busy_s = in_step.compute_s,
                       .both_s = in_step.overlap_s});
      moe_in_step = compute_in_step = 0;
      step_begin = prefill ? std::chrono::steady_clock::time_point::min() : sp.end;
    }
    if (steps.empty())
      continue;
    (prefill ? r.prefill_steps : r.decode_steps).push_back(steps);
    level_result::phase_step mine;
    if (prefill) {  // the median step, whole (one per wave)
      std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2),
                       steps.end(), [](const auto& a, const auto& b) { return a.step_s < b.step_s; });
      mine = steps[steps.size() / 2];
    } else {
      auto med = [&](double level_result::phase_step::*f) {
        std::vector<double> v;
        v.reserve(steps.size());
        for (const auto& st : steps)
          v.push_back(st.*f);
        return median(std::move(v));
      };
      mine = {.step_s = med(&level_result::phase_step::step_s),
              .moe_s = med(&level_result::phase_step::moe_s),
              .comm_s = med(&level_result::phase_step::comm_s),
              .wait_s = med(&level_result::phase_step::wait_s)};
    }
    level_result::phase_step& into = prefill ? r.prefill : r.decode;
    const auto ranks = static_cast<double>(prefill ? topo.prefill_ranks : topo.decode_ranks);
    into.step_s = std::max(into.step_s, mine.step_s);
    into.moe_s = std::max(into.moe_s, mine.moe_s);
    into.comm_s = std::max(into.comm_s, mine.comm_s);
    into.wait_s += mine.wait_s / ranks;
  }
  for (int64_t d = 0; d < topo.decode_ranks; ++d) {
    const int64_t g = topo.prefill_ranks + d;
    auto first = std::chrono::steady_clock::time_point::max(),
         last = std::chrono::steady_clock::time_point::min();
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
    if (sum.compute_s > r.busiest_compute_s) {  // the rank with the most work
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

// One overlap run's figures, the link on every other step: per rank, each step on the link
// against its neighbours off it (tools/overlap_share.hpp), pooled over ranks; times as the
// busiest rank's medians; in-trace over the steps on the link, the mean over ranks.
struct alternating_run {
  double step_s[2] = {0, 0}, moe_s[2] = {0, 0};  // [on the link]: median step, its MoE compute
  double comm_s = 0;                             // median link-busy time of a step on the link
  double in_trace = 0;
  std::vector<double> hidden, by_waits;  // the shares of every pair (none of -1: nothing to hide)
};

alternating_run summarize_alternating(const std::vector<std::vector<level_result::phase_step>>& ranks) {
  alternating_run f;
  auto keep = [](std::vector<double>& into, const std::vector<double>& shares) {
    std::copy_if(shares.begin(), shares.end(), std::back_inserter(into), [](double x) { return x >= 0.0; });
  };
  for (const std::vector<level_result::phase_step>& steps : ranks) {
    std::vector<step_sample> samples;
    std::vector<double> step_s[2], moe_s[2], comm_s;
    double busy = 0, both = 0, busy_link = 0;
    for (const level_result::phase_step& st : steps) {
      samples.push_back({.step_s = st.step_s, .wait_s = st.wait_s, .moe_s = st.moe_s, .comm_s = st.comm_s});
      const int on = st.comm_s > 0.0 ? 1 : 0;
      step_s[on].push_back(st.step_s);
      moe_s[on].push_back(st.moe_s);
      if (on) {
        comm_s.push_back(st.comm_s);
        busy += st.busy_s;
        both += st.both_s;
        busy_link += st.comm_s;
      }
    }
    const neighbour_shares sh = shares_against_neighbours(samples);
    keep(f.hidden, sh.hidden);
    keep(f.by_waits, sh.by_waits);
    for (int on = 0; on < 2; ++on) {
      f.step_s[on] = std::max(f.step_s[on], median(step_s[on]));
      f.moe_s[on] = std::max(f.moe_s[on], median(moe_s[on]));
    }
    f.comm_s = std::max(f.comm_s, median(comm_s));
    if (const double most = std::min(busy, busy_link); most > 0)
      f.in_trace += both / most / static_cast<double>(ranks.size());
  }
  return f;
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
  const std::string threads = o.session.threads > 0 ? std::to_string(o.session.threads) + " threads"
                                                    : "all cores";
  std::printf(
    "1 rank: one model_runner on %s (%s backend), continuous batching, %ld tokens per forward call:\n",
    threads.c_str(), std::string(device->name()).c_str(), static_cast<long>(base.token_budget));
  std::printf("%12s %10s %12s %12s %10s %10s\n", "concurrency", "requests", "output tok/s", "wall s",
              "TTFT ms", "TPOT ms");
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
      !o.trace_file.empty() && !dir.empty() && !std::filesystem::is_directory(dir))  // not minutes later
    throw input_error("--trace: no directory " + dir.string() + " to write " + o.trace_file + " into");
  const model_config model = load_model_config(o.session.model_dir);
  validate_for_model(topo, model);  // before the weights load
  // Every request must run to its full --output-len (ignore_eos), or the figures measure less
  // than they say; the decode-only level uses 8-token prompts.
  if (const int64_t longest = std::max<int64_t>(o.prompt_len, 8) + o.output_len,
      context = served_context(topo, model.max_position_embeddings);
      longest > context)
    throw input_error("--prompt-len/--output-len: requests of " + std::to_string(longest) +
                      " tokens do not fit the served context of " + std::to_string(context) +
                      " (the least of --max-context, the model's max_position_embeddings and "
                      "--kv-blocks x --page-size)");
  std::shared_ptr<const model_session> s = load_model(o.session, /*need_tokenizer=*/true);
  std::shared_ptr<const model_weights> weights(s, &s->weights);
  const int64_t vocab = s->weights.config.vocab_size;
  std::printf(
    "bench-cluster: %ldP+%ldD, overlap %s, dispatch %s, combine %s, link model %s, %s backend, prompt %ld, output %ld\n",
    static_cast<long>(topo.prefill_ranks), static_cast<long>(topo.decode_ranks),
    topo.two_batch_overlap ? "on" : "off", topo.dispatch_dtype.c_str(), topo.combine.c_str(),
    topo.link_model ? "on" : "off", o.session.reference ? "reference" : "fast",
    static_cast<long>(o.prompt_len), static_cast<long>(o.output_len));
  if (!o.overlap) {
    std::printf("%12s %10s %12s %12s %10s %10s %12s %10s\n", "concurrency", "requests", "output tok/s",
                "wall s", "TTFT ms", "TPOT ms", "decode steps", "overhead");
    std::vector<level_result> breakdowns;
    for (const int64_t conc : o.concurrency) {
      const int64_t n = o.requests_per_level ? o.requests_per_level : 2 * conc;
      const level_result r = run_level(*s, weights, topo, o.session.reference,
                                       {random_requests(n, o.prompt_len, o.output_len, vocab, o.seed)}, conc,
                                       o.trace_file);
      const double overhead = r.busiest_active_s > 0 ? 1.0 - r.busiest_compute_s / r.busiest_active_s : 0.0;
      std::printf("%12ld %10ld %12.1f %12.2f %10.1f %10.1f %12ld %9.1f%%\n", static_cast<long>(conc),
                  static_cast<long>(n), r.output_tok_s, r.wall_s, 1e3 * r.mean_ttft_s, 1e3 * r.mean_tpot_s,
                  static_cast<long>(r.num_decode_steps), 100.0 * overhead);
      breakdowns.push_back(r);
    }
    std::printf("step-time breakdown of the busiest decode rank (trace compute spans), ms per decode step; "
                "outside = waits for peers and framework:\n%12s",
                "concurrency");
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
  // overlap: compute alone (link model off) to set the link, then runs with the link on every
  // other step, one and two micro-batches
  const int64_t conc = o.concurrency.front();
  const std::vector<std::vector<request_spec>> decode_specs = {
    random_requests(conc, 8, o.output_len, vocab, o.seed)};
  // Prefill: a prompt per prefill rank per wave, one step each; seven waves give every rank three
  // steps on the link beside steps off it after the run's first (which pays its warm-up).
  constexpr int prefill_waves = 7;
  std::vector<std::vector<request_spec>> prefill_specs;
  prefill_specs.reserve(prefill_waves);
  for (int i = 0; i < prefill_waves; ++i)
    prefill_specs.push_back(random_requests(topo.prefill_ranks, o.prompt_len, 1, vocab, o.seed + 1 + i));
  const int64_t num_prefill = topo.prefill_ranks;
  topology_config t = topo;
  // The link: bandwidth-bound, as DeepEP's normal kernels are (a small fixed latency), so a
  // micro-batch's messages take half as long as the whole batch's.
  link_spec link[2] = {{.latency_us = 20.0, .bandwidth_gb_s = 1.0},
                       {.latency_us = 20.0, .bandwidth_gb_s = 1.0}};
  // the trace of the last two-micro-batch run of each phase: FILE with .decode / .prefill before
  // its extension
  std::string trace_of[2];  // decode, prefill
  if (!o.trace_file.empty())
    for (int phase = 0; phase < 2; ++phase) {
      std::filesystem::path f = o.trace_file;
      const std::string ext = f.extension().string();
      trace_of[phase] = f.replace_extension((phase == 0 ? ".decode" : ".prefill") + ext).string();
    }
  auto once = [&](bool decode, bool on, bool two, bool even_steps_only) {
    t.link_model = on;
    t.two_batch_overlap = two;
    t.intra_node = t.inter_node = link[decode ? 0 : 1];
    const std::string trace = even_steps_only && two ? trace_of[decode ? 0 : 1] : std::string();
    return decode ? run_level(*s, weights, t, o.session.reference, decode_specs, conc, trace, even_steps_only)
                  : run_level(*s, weights, t, o.session.reference, prefill_specs, num_prefill, trace,
                              even_steps_only);
  };
  // warm-up: the first touch of mmapped weights is many times slower than the steady state
  (void)once(true, false, false, false);
  (void)once(false, false, false, false);
  // calibrate: transfer time scales as 1 / bandwidth, so the traced comm time of one probe at
  // 1 GB/s gives the bandwidth at which a step's communication takes as long as the compute that
  // is to hide it: the MoE layers' stages with two micro-batches (traced without the link)
  // Decode takes the median step, as the figures below do: a run's first steps decode the few
  // requests whose prompts were done first, and such steps read all the weights for little
  // communication, so a mean over all steps set the link ~20 % slower than compute for the
  // steps that are measured.
  // The compute is the median of three runs: one run's compute can be 25 % off the VM's usual
  // (a prefill's MoE stages took 1692 ms in one calibration run against 1222-1424 in others), and
  // the link it sets holds for every round. So is the probe's comm (bytes at a fixed rate): one
  // decode probe's median step once came out with next to no traffic, which set the link ~1000x
  // too slow for every round. (Runs without the link ignore its settings.)
  link[0] = link[1] = {.latency_us = 0.0, .bandwidth_gb_s = 1.0};
  std::vector<double> moe_runs[2], probes[2];  // decode, prefill
  for (int i = 0; i < 3; ++i)
    for (int phase = 0; phase < 2; ++phase) {
      const bool decode = phase == 0;
      const level_result compute = once(decode, false, true, false), probe = once(decode, true, false, false);
      moe_runs[phase].push_back((decode ? compute.decode : compute.prefill).moe_s);
      probes[phase].push_back((decode ? probe.decode : probe.prefill).comm_s);
    }
  const double moe_decode = std::max(1e-9, median(moe_runs[0]));   // a run with no MoE work
  const double moe_prefill = std::max(1e-9, median(moe_runs[1]));  // still gets a finite link
  link[0] = {.latency_us = 20.0, .bandwidth_gb_s = std::max(1e-4, median(probes[0]) / moe_decode)};
  link[1] = {.latency_us = 20.0, .bandwidth_gb_s = std::max(1e-4, median(probes[1]) / moe_prefill)};
  std::printf("MoE-layer compute per step, two micro-batches: decode %.2f ms, prefill %.2f ms; "
              "the rest is dense layers and LOGITS\n",
              1e3 * moe_decode, 1e3 * moe_prefill);
  std::printf(
    "link model: %.0f us + bytes at %.3f GB/s in decode, %.3f GB/s in prefill (comm ~ MoE compute)\n",
    link[0].latency_us, link[0].bandwidth_gb_s, link[1].bandwidth_gb_s);
  std::fflush(stdout);  // the rounds take minutes: show the link they run on
  // Rounds: per phase, one run with one micro-batch and one with two, each with the link on even
  // steps only (link_model_config::even_steps_only). Every step on the link is compared with its
  // neighbours off it (tools/overlap_share.hpp): one run, the same moment of the VM and nearly
  // the same batch, where two runs compared differed by up to a third in compute speed on these
  // two shared cores. What the link exposed is taken two ways:
  //  - hidden: the step's time minus its neighbours';
  //  - by waits: the step's time outside compute spans minus its neighbours'.
  // And in-trace: the share of the link's busy time during which the rank computes, over the
  // steps on the link (mean over ranks).
  struct phase_runs {
    std::vector<double> time[2][2];    // [on the link][micro-batches - 1]: median step per run
    std::vector<double> comm, moe[2];  // 2 mb: comm of a step on the link; MoE compute [on the link]
    std::vector<double> in_trace[2];   // [micro-batches - 1], per run
    std::vector<double> hidden[2], by_waits[2];        // every pair of every run
    std::vector<double> round_hidden, round_by_waits;  // 2 mb: each run's median
  } phases[2];                                         // decode, prefill
  for (int64_t round = 0; round < o.repeat; ++round)
    for (int phase = 0; phase < 2; ++phase) {
      const bool decode = phase == 0;
      phase_runs& pr = phases[phase];
      for (int mb = 0; mb < 2; ++mb) {
        const level_result r = once(decode, true, mb == 1, true);
        const alternating_run f = summarize_alternating(decode ? r.decode_steps : r.prefill_steps);
        for (int on = 0; on < 2; ++on)
          pr.time[on][mb].push_back(f.step_s[on]);
        pr.in_trace[mb].push_back(f.in_trace);
        pr.hidden[mb].insert(pr.hidden[mb].end(), f.hidden.begin(), f.hidden.end());
        pr.by_waits[mb].insert(pr.by_waits[mb].end(), f.by_waits.begin(), f.by_waits.end());
        if (mb == 1) {
          pr.comm.push_back(f.comm_s);
          pr.moe[0].push_back(f.moe_s[0]);
          pr.moe[1].push_back(f.moe_s[1]);
          pr.round_hidden.push_back(median(f.hidden));
          pr.round_by_waits.push_back(median(f.by_waits));
        }
      }
    }
  auto ms = [](const std::vector<double>& v) { return 1e3 * median(v); };
  auto pct = [](const std::vector<double>& v) { return 100.0 * median(v); };
  std::printf(
    "%ld rounds, the link on every other step; times and in-trace: medians over runs (comm and MoE-layer "
    "compute: two micro-batches, steps off / on the link); hidden and by waits: medians over every step "
    "on the link against its neighbours off it; shares for 1 -> 2 micro-batches\n",
    static_cast<long>(o.repeat));
  std::printf("%8s %11s %11s %11s %11s %10s %17s %15s %15s %15s %11s\n", "phase", "compute 1mb",
              "compute 2mb", "+link 1mb", "+link 2mb", "comm", "MoE 2mb off/on", "hidden", "in-trace",
              "by waits", "pairs 2mb");
  for (int phase = 0; phase < 2; ++phase) {
    const phase_runs& pr = phases[phase];
    std::printf(
      "%8s %8.1f ms %8.1f ms %8.1f ms %8.1f ms %7.1f ms %6.1f/%6.1f ms %5.1f -> %5.1f%% %5.1f -> %5.1f%% "
      "%5.1f -> %5.1f%% %11zu\n",
      phase == 0 ? "decode" : "prefill", ms(pr.time[0][0]), ms(pr.time[0][1]), ms(pr.time[1][0]),
      ms(pr.time[1][1]), ms(pr.comm), ms(pr.moe[0]), ms(pr.moe[1]), pct(pr.hidden[0]), pct(pr.hidden[1]),
      pct(pr.in_trace[0]), pct(pr.in_trace[1]), pct(pr.by_waits[0]), pct(pr.by_waits[1]),
      pr.hidden[1].size());
  }
  for (int phase = 0; phase < 2; ++phase) {  // the spread behind the medians
    std::printf("%8s, two micro-batches, per round: hidden / in-trace / by waits (%%):",
                phase == 0 ? "decode" : "prefill");
    for (int64_t i = 0; i < o.repeat; ++i)
      std::printf(" %.0f/%.0f/%.0f", 100.0 * phases[phase].round_hidden[i],
                  100.0 * phases[phase].in_trace[1][i], 100.0 * phases[phase].round_by_waits[i]);
    std::printf("\n");
  }
}

}  // namespace

void add_bench_cluster(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  CLI::App* cmd = app.add_subcommand("bench-cluster",
                                     "throughput, framework overhead and overlap of the in-process cluster");
  add_session_options(*cmd, o->session, /*reference_by_default=*/false, /*kv_flags=*/false);
  add_topology_options(*cmd, o->topology);
  cmd->add_option("--concurrency", o->concurrency, "concurrent requests per level (overlap: the first)")
    ->delimiter(',')
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--prompt-len", o->prompt_len, "prompt tokens per request")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--output-len", o->output_len, "output tokens per request")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--requests", o->requests_per_level, "requests per level (0: twice the concurrency)")
    ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_flag("--overlap", o->overlap, "measure how much communication two micro-batches hide");
  cmd->add_flag(
    "--single-rank", o->single_rank,
    "also run each level through one model_runner on --threads (the \"1 rank\" baseline: no ranks, "
    "continuous batching)");
  cmd->add_option("--repeat", o->repeat, "overlap: rounds of runs with one and two micro-batches (default 1)")
    ->check(CLI::Range(int64_t{1}, int64_t{20}));
  cmd->add_option("--seed", o->seed, "prompt RNG seed")->check(non_negative_integer);
  cmd->add_option(
    "--trace", o->trace_file,
    "write the last run's Chrome trace (JSON) to this file (--overlap: the last two-micro-batch runs, "
    "to FILE with .decode / .prefill before its extension)");
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
