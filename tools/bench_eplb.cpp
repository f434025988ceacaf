// tools/bench_eplb.cpp
// `moeserve bench-eplb`: what one rebalance of the decode group does to serving, on the
// in-process cluster. Three waves of --concurrency requests (random prompts, fixed lengths), each
// submitted at once, run one after another: before, during (the decode group's expert balancer
// is asked to rebalance --move-after-ms into the wave: its ranks copy the experts they lack
// from peers, as messages, while they decode, then switch at one step), after. It prints output
// tok/s per wave, the balancedness per MoE layer before and after, the bytes moved (minimal
// movement and the plain plan), each decode rank's expert memory, and, from the trace, the
// decode steps of the second wave while every request decodes (from its last first token to
// its first finish; LOGITS end to LOGITS end, per rank): the median, and the longest of those
// that overlap the rebalance against the longest and the 99th percentile of the others.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "actors/expert_balancer.hpp"
#include "actors/system_config.hpp"
#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "tools/lib/cluster_client.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/lib/topology_options.hpp"

namespace moe::tools {

namespace {

using clock = std::chrono::steady_clock;

struct eplb_bench_options {
  session_options session;
  topology_options topology;
  int64_t concurrency = 16;  // requests per wave, all at once
  int64_t prompt_len = 64;
  int64_t output_len = 256;
  int64_t move_after_ms = 3000;
  uint64_t seed = 1;
};

double output_tok_s(const cluster_run& run) {
  int64_t n = 0;
  for (const cluster_request_result& q : run.requests) {
    if (q.result.reason == finish_reason::error)
      throw input_error("bench-eplb: a request failed (" + q.result.error + ")");
    n += static_cast<int64_t>(q.result.output_ids.size());
  }
  return run.wall_s > 0 ? static_cast<double>(n) / run.wall_s : 0.0;
}

// When every request of a wave submitted at `begin` decodes: from the last first token to the
// first finish.
std::pair<clock::time_point, clock::time_point> all_decoding(const cluster_run& run,
                                                             clock::time_point begin) {
  double from = 0, to = run.wall_s;
  for (const cluster_request_result& q : run.requests) {
    from = std::max(from, q.ttft_s);
    to = std::min(to, q.total_s);
  }
  const auto at = [begin](double s) {
    return begin + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s));
  };
  return {at(from), at(to)};
}

// One step of one rank: the time from its previous LOGITS end to this one's.
struct step_time {
  clock::time_point begin, end;
  [[nodiscard]] double ms() const { return std::chrono::duration<double, std::milli>(end - begin).count(); }
};

// Every step of the group's ranks (global ranks [first, first + count)) that began and ended
// within [from, to].
std::vector<step_time> group_steps(const std::vector<trace_span>& spans, int64_t first, int64_t count,
                                   clock::time_point from, clock::time_point to) {
  std::vector<step_time> steps;
  for (int64_t g = first; g < first + count; ++g) {
    std::vector<clock::time_point> ends;
    for (const trace_span& sp : spans)
      if (sp.rank == g && sp.lane == trace_lane::compute && sp.name.starts_with("LOGITS"))
        ends.push_back(sp.end);
    std::sort(ends.begin(), ends.end());
    for (size_t i = 1; i < ends.size(); ++i)
      if (ends[i - 1] >= from && ends[i] <= to)
        steps.push_back({.begin = ends[i - 1], .end = ends[i]});
  }
  return steps;
}

// The q-quantile (0..1) of the steps' times, ms.
double quantile_ms(std::vector<step_time> steps, double q) {
  if (steps.empty())
    return 0.0;
  const auto at = steps.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(steps.size() - 1));
  std::nth_element(steps.begin(), at, steps.end(),
                   [](const step_time& a, const step_time& b) { return a.ms() < b.ms(); });
  return at->ms();
}

void print_balancedness(const char* what, const std::vector<double>& b) {
  std::printf("  balancedness %-7s", what);
  double mean = 0;
  for (const double x : b) {
    std::printf(" %.3f", x);
    mean += x / static_cast<double>(b.size());
  }
  std::printf("   (mean %.3f)\n", mean);
}

// Each rank's expert memory, MB.
void print_expert_memory(caf::actor_system& sys, const cluster& c, const char* when) {
  caf::scoped_actor self{sys};
  std::printf("  expert memory %-7s", when);
  for (const auto& rank : c.decode_ranks)
    self->request(rank, std::chrono::seconds(10), stats_atom::value)
      .receive([&](const rank_stats& s) { std::printf(" %.1f", static_cast<double>(s.expert_bytes) / 1e6); },
               [](caf::error&) { std::printf(" ?"); });
  std::printf("  MB per decode rank\n");
}

void run(const eplb_bench_options& o) {
  topology_config topo = resolve_topology(o.topology);
  topo.eplb_interval_steps = 0;  // the one rebalance is the bench's
  const model_config model = load_model_config(o.session.model_dir);
  validate_for_model(topo, model);
  if (model.n_routed_experts == 0)
    throw input_error("bench-eplb: the model has no routed experts to move");
  if (topo.decode_ranks < 2)
    throw input_error("bench-eplb: the decode group has one rank: nothing moves between ranks");
  std::shared_ptr<const model_session> s = load_model(o.session, /*need_tokenizer=*/true);
  std::shared_ptr<const model_weights> weights(s, &s->weights);
  const int64_t vocab = s->weights.config.vocab_size;
  std::printf(
    "bench-eplb: %ldP+%ldD, %ld redundant experts, link model %s, %s backend; waves of %ld requests "
    "at once, prompt %ld, output %ld; the decode group rebalances %ld ms into the second\n",
    static_cast<long>(topo.prefill_ranks), static_cast<long>(topo.decode_ranks),
    static_cast<long>(topo.redundant_experts), topo.link_model ? "on" : "off",
    o.session.reference ? "reference" : "fast", static_cast<long>(o.concurrency),
    static_cast<long>(o.prompt_len), static_cast<long>(o.output_len), static_cast<long>(o.move_after_ms));

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  const cluster c = spawn_cluster(sys, weights, s->tok,
                                  {.topology = topo, .reference = o.session.reference, .trace = true});
  rebalance_report report;
  std::string failure;
  clock::time_point move_begin, move_end, wave_begin;
  std::pair<clock::time_point, clock::time_point> decoding;
  double tok_s[3] = {0, 0, 0};
  auto wave = [&](uint64_t seed) {
    return run_requests(sys, c, random_requests(o.concurrency, o.prompt_len, o.output_len, vocab, seed),
                        o.concurrency);
  };
  try {
    print_expert_memory(sys, c, "before");
    tok_s[0] = output_tok_s(wave(o.seed));
    wave_begin = clock::now();
    std::thread mover([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(o.move_after_ms));
      caf::scoped_actor self{sys};
      caf::actor balancer;
      self
        ->request(c.supervisor, std::chrono::seconds(10), lookup_atom::value, std::string("expert_balancer"),
                  int64_t{1})
        .receive([&](const caf::actor& a) { balancer = a; }, [&](caf::error& e) { failure = sys.render(e); });
      if (!balancer)
        return;
      move_begin = clock::now();
      self
        ->request(caf::actor_cast<expert_balancer_actor>(balancer), std::chrono::seconds(300),
                  rebalance_atom::value)
        .receive([&](const rebalance_report& r) { report = r; },
                 [&](caf::error& e) { failure = sys.render(e); });
      move_end = clock::now();
    });
    const cluster_run during = wave(o.seed + 1);
    mover.join();
    tok_s[1] = output_tok_s(during);
    decoding = all_decoding(during, wave_begin);
    print_expert_memory(sys, c, "after");
    tok_s[2] = output_tok_s(wave(o.seed + 2));
  } catch (...) {
    c.stop();
    throw;
  }
  c.stop();
  if (!failure.empty() || !report.error.empty())
    throw input_error("bench-eplb: the rebalance failed: " + (failure.empty() ? report.error : failure));
  std::printf("  output tok/s: before %.1f, during %.1f, after %.1f\n", tok_s[0], tok_s[1], tok_s[2]);
  print_balancedness("before", report.balancedness_before);
  print_balancedness("after", report.balancedness_after);
  std::printf("  moved %ld experts, %.1f MB (plain plan %.1f MB), epoch %llu, in %.3f s\n",
              static_cast<long>(report.moved_experts), static_cast<double>(report.moved_bytes) / 1e6,
              static_cast<double>(report.plain_moved_bytes) / 1e6,
              static_cast<unsigned long long>(report.epoch), report.seconds);
  const std::vector<step_time> steps = group_steps(c.trace->spans(), topo.prefill_ranks, topo.decode_ranks,
                                                   decoding.first, decoding.second);
  std::vector<step_time> during, outside;
  for (const step_time& st : steps)
    (st.end > move_begin && st.begin < move_end ? during : outside).push_back(st);
  const double med = quantile_ms(steps, 0.5);
  const auto times = [med](const char* what, double ms) {
    std::printf(" %s %.1f ms = %.2fx the median", what, ms, med > 0 ? ms / med : 0.0);
  };
  std::printf(
    "  decode steps while every request decodes (LOGITS to LOGITS, every rank): %zu, median %.1f ms\n",
    steps.size(), med);
  std::printf("    %zu overlap the rebalance:", during.size());
  times("longest", quantile_ms(during, 1.0));
  times(", p99", quantile_ms(during, 0.99));
  std::printf("\n    %zu do not:", outside.size());
  times("longest", quantile_ms(outside, 1.0));
  times(", p99", quantile_ms(outside, 0.99));
  std::printf("\n");
  if (move_begin < decoding.first || move_end > decoding.second)
    std::printf(
      "    (the rebalance was not all within the steady decode: change --move-after-ms or --output-len)\n");
}

}  // namespace

void add_bench_eplb(CLI::App& app) {
  auto o = std::make_shared<eplb_bench_options>();
  CLI::App* cmd = app.add_subcommand(
    "bench-eplb", "one expert rebalance of the decode group while serving: tok/s, balancedness, bytes moved, "
                  "step times");
  add_session_options(*cmd, o->session, /*reference_by_default=*/false, /*kv_flags=*/false);
  add_topology_options(*cmd, o->topology);
  cmd->add_option("--concurrency", o->concurrency, "requests per wave, submitted at once")
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--prompt-len", o->prompt_len, "prompt tokens per request")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--output-len", o->output_len, "output tokens per request")
    ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd
    ->add_option("--move-after-ms", o->move_after_ms,
                 "ask for the rebalance this long into the second wave (after its prefill)")
    ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  cmd->add_option("--seed", o->seed, "prompt RNG seed")->check(non_negative_integer);
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
