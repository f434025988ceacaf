// tools/bench_model.cpp
// `moeserve bench-model`: prefill and decode throughput of a checkpoint on the fast CPU path,
// the weight bytes each decoded token reads and how close decode gets to the machine's memory
// bandwidth (`--op-times`: and where a prefill's and a decode step's time goes, op by op); `--gemm` instead times
// the fast path's matmul kernels at the small preset's shapes.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "tools/bench_gemm_weights.hpp"
#include "tools/bench_weights.hpp"
#include "tools/commands.hpp"
#include "tools/model_flops.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/machine_peaks.hpp"
#include "tools/op_timing.hpp"

namespace moe::tools {

namespace {

struct bench_options {
  std::string model_dir;
  int threads = 0;
  int64_t prompt_len = 512;
  int64_t prefill_runs = 3;  // this VM's speed swings 20-40 % within minutes
  int64_t decode_prompt_len = 32;
  int64_t decode_steps = 128;  // batch 1 at 32 steps swung 2x between runs
  std::vector<int64_t> batches = {1, 8, 32};
  bool gemm = false;
  weight_options weights;
  bool op_times = false;
};

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// ---- --gemm: kernel microbenchmarks --------------------------------------------------------

void run_gemm(const bench_options& o) {
  auto dev = std::make_unique<cpu_fast_backend>(o.threads);
  const double peak = measure_peak(o.threads, peak_op::vfmadd231ps);
  std::printf(
    "fast-path matmul kernels, %d threads; BF16 GEMM peak (vfmadd231ps on widened bf16) %.1f GFLOP/s, "
    "vdpbf16ps %.1f\n",
    dev->num_threads(), peak * 1e-9, measure_peak(o.threads, peak_op::vdpbf16ps) * 1e-9);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3}) {
    std::printf("\nGEMM (prefill), %s weights:\n", std::string(dtype_name(type)).c_str());
    for (const gemm_shape& g : prefill_gemm_shapes()) {
      std::vector<std::unique_ptr<bench_weight>> ws;
      ws.push_back(make_bench_weight(type, g.out, g.in, 1));
      const double t = time_linear(*dev, ws, g.m,
                                   std::max<int64_t>(3, int64_t(4e9 / (2.0 * g.m * g.out * g.in))));
      const double flops = 2.0 * g.m * g.out * g.in / t;
      std::printf("  %-34s %8.1f GFLOP/s = %3.0f%% of peak  (%.3f ms)\n", g.what, flops * 1e-9,
                  100.0 * flops / peak, t * 1e3);
    }
  }
  const gemm_shape gemvs[] = {
    {"lm_head        [129280,1024]", 129280, 1024, 0},
    {"dense gate/up  [2816,1024]", 2816, 1024, 0},
    {"expert gate/up [256,1024]", 256, 1024, 0},
    {"expert down    [1024,256]", 1024, 256, 0},
  };
  for (dtype type : {dtype::bf16, dtype::f8_e4m3}) {
    std::printf("\ndecode matmuls (FP8 panels: GEMV up to 8 tokens, GEMM above; BF16: the GEMM's tile), %s "
                "weights, weight bytes per second:\n",
                std::string(dtype_name(type)).c_str());
    std::printf("  %-30s %12s %12s %12s\n", "", "1 token", "8 tokens", "32 tokens");
    for (const gemm_shape& g : gemvs) {
      // Enough distinct copies (>= 512 MiB) that every call reads its weight from memory.
      const int64_t bytes = g.out * g.in * dtype_size(type);
      const int64_t copies = std::max<int64_t>(1, (int64_t{512} << 20) / bytes);
      std::vector<std::unique_ptr<bench_weight>> ws;
      for (int64_t c = 0; c < copies; ++c)
        ws.push_back(make_bench_weight(type, g.out, g.in, static_cast<uint64_t>(c + 2)));
      std::printf("  %-30s", g.what);
      for (int64_t m : {1, 8, 32}) {
        const double t = time_linear(*dev, ws, m, std::max<int64_t>(copies, 8));
        std::printf(" %7.1f GB/s", static_cast<double>(bytes) / t * 1e-9);
      }
      std::printf("\n");
    }
  }
  std::printf("\nmemory read bandwidth (1 GiB stream): %.1f GB/s\n",
              measure_read_bandwidth(o.threads) * 1e-9);
}

// ---- model throughput ----------------------------------------------------------------------

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids)
    id = dist(rng);
  return ids;
}

int32_t argmax(const float* logits, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

// A runner with the session's weights and cache over a timing backend over the session's device
// (--op-times).
struct timed_runner {
  explicit timed_runner(model_session& s) : timing(*s.device), runner(s.weights, timing, *s.cache) {}
  op_timing_backend timing;
  model_runner runner;
};

// One prompt of prompt_len tokens in one forward call; tokens per second.
double bench_prefill(model_session& s, model_runner& runner, int64_t prompt_len) {
  const std::vector<int32_t> prompt = random_tokens(prompt_len, s.weights.config.vocab_size, 1);
  sequence_kv kv;
  if (!kv.reserve(*s.cache, prompt_len))
    throw input_error("bench-model: the KV cache cannot hold the prompt");
  const batch_entry entry{.tokens = prompt, .kv = &kv};
  const auto start = clock_type::now();
  (void)runner.forward(std::span(&entry, 1));
  const double t = seconds_since(start);
  kv.release(*s.cache);
  return static_cast<double>(prompt_len) / t;
}

struct decode_result {
  double tok_s = 0.0;                 // at the median step time
  double read_share = 0.0;            // batch 1: median over steps of plain read / step time
  double step_s = 0.0, read_s = 0.0;  // batch 1: median step time, median plain read time
};

// `batch` sequences prefilled with short prompts, then `steps` greedy decode steps, all
// sequences in one forward call per step; decoded tokens per second at the median step time
// (robust to the odd step slowed by other work on a shared machine). At batch 1, each step is
// followed by a plain read of the same amount of weights (`reader`), so both see the same
// moment of a machine whose memory bandwidth drifts.
decode_result bench_decode(model_session& s, int64_t batch, int64_t prompt_len, int64_t steps,
                           thread_pool* reader, bool op_times) {
  // --op-times: the steps run through a timing backend over the session's device
  std::optional<timed_runner> timed;
  if (op_times)
    timed.emplace(s);
  op_timing_backend* timing = timed ? &timed->timing : nullptr;
  model_runner& runner = timed ? timed->runner : *s.runner;
  const int64_t vocab = s.weights.config.vocab_size;
  std::vector<sequence_kv> kvs(static_cast<size_t>(batch));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<batch_entry> entries;
  for (int64_t b = 0; b < batch; ++b) {
    if (!kvs[b].reserve(*s.cache, prompt_len + steps))
      throw input_error("bench-model: the KV cache cannot hold the decode batch");
    prompts.push_back(random_tokens(prompt_len, vocab, static_cast<uint32_t>(100 + b)));
  }
  for (int64_t b = 0; b < batch; ++b)
    entries.push_back({.tokens = prompts[b], .kv = &kvs[b]});
  std::vector<float> logits = runner.forward(entries);
  if (timing)
    timing->clear();  // the prompts' prefill is not a decode step
  std::vector<int32_t> next(static_cast<size_t>(batch));
  std::vector<double> step_seconds, read_seconds, shares;
  std::vector<uint64_t> sinks(reader ? static_cast<size_t>(reader->size()) : 0);
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t b = 0; b < batch; ++b) {
      next[b] = argmax(logits.data() + b * vocab, vocab);
      entries[b].tokens = std::span(&next[b], 1);
      entries[b].decode = true;
    }
    const auto start = clock_type::now();
    logits = runner.forward(entries);
    step_seconds.push_back(seconds_since(start));
    if (timing && step == 0 && steps > 1)
      timing->clear();  // the first step also absorbs each layer's kv_b_proj
    if (reader != nullptr && batch == 1) {
      read_seconds.push_back(time_plain_read(*reader, token_weight_spans(s.weights, step), sinks));
      shares.push_back(read_seconds.back() / step_seconds.back());
    }
  }
  asm volatile("" : : "r"(sinks.data()) : "memory");  // keep the sums (and so the reads)
  if (timing) {
    const int64_t timed_steps = steps > 1 ? steps - 1 : steps;
    std::printf("where a batch-%lld decode step's time goes (%lld steps%s, each op timed alone):\n",
                static_cast<long long>(batch), static_cast<long long>(timed_steps),
                steps > 1 ? " after the first, which also absorbs kv_b_proj" : "");
    timing->print(stdout, timed_steps);
  }
  for (auto& kv : kvs)
    kv.release(*s.cache);
  auto median = [](std::vector<double> v) {
    if (v.empty())
      return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double step_s = median(step_seconds);
  return {.tok_s = static_cast<double>(batch) / step_s,
          .read_share = median(shares),
          .step_s = step_s,
          .read_s = median(read_seconds)};
}

void run_model(const bench_options& o) {
  session_options so;
  so.model_dir = o.model_dir;
  so.weights = o.weights;
  so.threads = o.threads;
  const int64_t max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  so.max_context = std::max(o.prompt_len, o.decode_prompt_len + o.decode_steps);
  so.kv_blocks = (o.prompt_len + so.block_size - 1) / so.block_size +
                 max_batch * ((o.decode_prompt_len + o.decode_steps + so.block_size - 1) / so.block_size);
  auto s = open_session(so, /*need_tokenizer=*/false);
  const model_config& cfg = s->weights.config;
  // the KV blocks above are sized from the flags, so the model's own context is checked here
  if (o.prompt_len > cfg.max_position_embeddings)
    throw input_error("--prompt-len: " + std::to_string(o.prompt_len) + " tokens is over the model's " +
                      std::to_string(cfg.max_position_embeddings) +
                      "-token context (max_position_embeddings)");
  if (o.decode_prompt_len + o.decode_steps > cfg.max_position_embeddings)
    throw input_error(
      "--decode-prompt-len + --decode-steps: " + std::to_string(o.decode_prompt_len + o.decode_steps) +
      " tokens is over the model's " + std::to_string(cfg.max_position_embeddings) +
      "-token context (max_position_embeddings)");
  const int64_t bytes_per_token = weight_bytes_per_token(s->weights);
  auto* fast = dynamic_cast<cpu_fast_backend*>(s->device.get());
  std::printf("model %s: %lld layers, hidden %lld, vocab %lld, lm_head %s%s, backend %s, %d threads\n",
              o.model_dir.c_str(), static_cast<long long>(cfg.num_hidden_layers),
              static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
              std::string(dtype_name(s->weights.lm_head.type)).c_str(),
              o.weights.lm_head_fp8 ? " (--lm-head-fp8)" : "", std::string(s->device->name()).c_str(),
              fast ? fast->num_threads() : 1);

  (void)bench_prefill(*s, *s->runner, std::min<int64_t>(o.prompt_len, 64));  // warm up: page in weights
  std::vector<double> runs;
  for (int64_t i = 0; i < o.prefill_runs; ++i)
    runs.push_back(bench_prefill(*s, *s->runner, o.prompt_len));
  std::vector<double> sorted = runs;
  std::sort(sorted.begin(), sorted.end());
  std::string listed;
  for (const double r : runs)
    listed += (listed.empty() ? "" : ", ") + std::to_string(static_cast<int64_t>(r + 0.5));
  std::printf("prefill: %lld-token prompt          %9.1f tok/s  (best of %lld runs, median %.1f: %s)\n",
              static_cast<long long>(o.prompt_len), sorted.back(), static_cast<long long>(o.prefill_runs),
              sorted[sorted.size() / 2], listed.c_str());
  const double prefill_gflops = sorted.back() / static_cast<double>(o.prompt_len) *
                                prefill_flops(cfg, o.prompt_len) * 1e-9;
  if (o.op_times) {  // the same prefills again, each op timed
    timed_runner timed(*s);
    for (int64_t i = 0; i < o.prefill_runs; ++i)
      (void)bench_prefill(*s, timed.runner, o.prompt_len);
    std::printf("where a %lld-token prefill's time goes (%lld more runs, each op timed alone):\n",
                static_cast<long long>(o.prompt_len), static_cast<long long>(o.prefill_runs));
    timed.timing.print(stdout, o.prefill_runs, "prefill");
  }
  const double peak = measure_peak(o.threads, peak_op::vfmadd231ps) * 1e-9;
  const double peak_dp = measure_peak(o.threads, peak_op::vdpbf16ps) * 1e-9;
  std::printf("prefill: %.1f GFLOP/s (matmuls and attention, tools/model_flops.hpp) = %.0f%% of this "
              "machine's BF16 GEMM peak, %.1f GFLOP/s (vfmadd231ps on %d threads; vdpbf16ps: %.1f)\n",
              prefill_gflops, 100.0 * prefill_gflops / peak, peak, fast ? fast->num_threads() : 1, peak_dp);
  double decode1 = 0.0;
  decode_result paired;
  // The stream right before and right after the batch-1 decode (else after every decode): the
  // VM's bandwidth moves within a minute, and a limit read minutes away can be half the rate the
  // decode itself saw; the higher of the two sets the limit.
  std::vector<double> streams;
  for (int64_t batch : o.batches) {
    if (batch == 1)
      streams.push_back(measure_read_bandwidth(o.threads));
    const decode_result r = bench_decode(*s, batch, o.decode_prompt_len, o.decode_steps,
                                         fast ? &fast->pool() : nullptr, o.op_times);
    if (batch == 1) {
      streams.push_back(measure_read_bandwidth(o.threads));
      decode1 = std::max(decode1, r.tok_s);
      paired = r;
    }
    std::printf("decode:  batch %3lld (median of %lld steps) %9.1f tok/s\n", static_cast<long long>(batch),
                static_cast<long long>(o.decode_steps), r.tok_s);
  }
  if (streams.empty())
    streams.push_back(measure_read_bandwidth(o.threads));
  const double bandwidth = *std::max_element(streams.begin(), streams.end());
  std::printf("weight bytes read per decoded token: %.1f MB\n", static_cast<double>(bytes_per_token) * 1e-6);
  if (streams.size() == 2)
    std::printf(
      "memory read bandwidth (1 GiB stream, before and after the batch-1 decode): %.1f and %.1f GB/s "
      "-> limit %.1f tok/s at batch 1\n",
      streams[0] * 1e-9, streams[1] * 1e-9, bandwidth / static_cast<double>(bytes_per_token));
  else
    std::printf("memory read bandwidth (1 GiB stream): %.1f GB/s -> limit %.1f tok/s at batch 1\n",
                bandwidth * 1e-9, bandwidth / static_cast<double>(bytes_per_token));
  if (decode1 > 0.0)
    std::printf("batch-1 decode reads %.1f GB/s of weights = %.0f%% of the bandwidth limit\n",
                decode1 * static_cast<double>(bytes_per_token) * 1e-9,
                100.0 * decode1 * static_cast<double>(bytes_per_token) / bandwidth);
  if (paired.read_s > 0.0)
    std::printf("batch-1 decode step %.2f ms vs a plain read of its weight bytes %.2f ms (%.1f GB/s), "
                "each step then its read: %.0f%% of that limit (median of steps)\n",
                1e3 * paired.step_s, 1e3 * paired.read_s,
                static_cast<double>(bytes_per_token) / paired.read_s * 1e-9, 100.0 * paired.read_share);
}

}  // namespace

void add_bench_model(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  CLI::App* cmd = app.add_subcommand("bench-model", "prefill / decode throughput on the fast CPU path");
  cmd->add_option("--model", o->model_dir, "checkpoint directory (config.json, *.safetensors)");
  add_weight_options(*cmd, o->weights);
  cmd->add_option("--threads", o->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--prompt-len", o->prompt_len, "prefill prompt tokens")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--prefill-runs", o->prefill_runs, "prefills timed (the best and the median are printed)")
    ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--decode-prompt-len", o->decode_prompt_len, "prompt tokens of each decode sequence")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--decode-steps", o->decode_steps, "decode steps per batch size")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--batches", o->batches, "decode batch sizes")
    ->delimiter(',')
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag(
    "--op-times", o->op_times,
    "also time every op of the prefills (run again) and of the decode steps: where a prefill's and a step's time goes at each batch size, and each op's weight read rate");
  cmd->add_flag("--gemm", o->gemm, "time the matmul kernels at the small preset's shapes instead");
  cmd->callback([o] {
    if (!cpu_fast_path_supported())
      throw input_error("bench-model measures the fast path, which needs AVX-512 BF16; this CPU lacks it");
    if (o->gemm)
      run_gemm(*o);
    else if (o->model_dir.empty())
      throw input_error("bench-model: --model DIR is required (or --gemm)");
    else
      run_model(*o);
  });
}

}  // namespace moe::tools
