// tools/lib/model_session.cpp
#include "tools/lib/model_session.hpp"

#include <filesystem>

#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/fp8_quantize.hpp"
#include "tools/lib/load_progress.hpp"

namespace moe::tools {

void add_weight_options(CLI::App& cmd, weight_options& opts) {
  cmd.add_flag("--mmap-weights", opts.mmap,
               "map the checkpoint files (one page cache shared with other processes) instead of "
               "copying the weights into transparent huge pages (the default: huge pages on any "
               "file system and kernel, and FP8 weights repacked into the GEMV's panels: much faster "
               "small-batch decode)");
  cmd.add_flag("--lm-head-fp8", opts.lm_head_fp8,
               "quantise the lm_head to FP8 E4M3 in 128x128 blocks at load, as the checkpoint's other "
               "linear weights (V3's FP8 release keeps it BF16): half its bytes, the largest single read "
               "of a small-batch decode step on small models; the logits move by about FP8's rounding");
}

model_weights load_weights(const std::string& dir, const weight_options& opts, bool reference) {
  // FP8 weights in the fast kernels' panel layout, unless the reference loops run (they read any
  // layout, but as the specification they read the checkpoint's own)
  model_weights w =
    load_model_weights(checkpoint::open(dir, opts.mmap ? weight_memory::mmap : weight_memory::copy,
                                        stderr_load_progress(), /*fp8_panels=*/!reference));
  if (opts.lm_head_fp8)
    quantize_lm_head_fp8(w, /*panels=*/!reference);
  if (!reference)  // the fast path multiplies BF16 weights from panels
    fast::prepare_fast_weights(w);
  return w;
}

void add_session_options(CLI::App& cmd, session_options& opts, bool reference_by_default, bool kv_flags) {
  cmd.add_option("--model", opts.model_dir, "checkpoint directory (config.json, *.safetensors)")->required();
  opts.reference = reference_by_default;
  if (reference_by_default)
    cmd.add_flag_function(
      "--fast", [&opts](int64_t) { opts.reference = false; },
      "use the fast CPU path (bf16 activations) instead of the fp32 reference");
  else
    cmd.add_flag("--reference", opts.reference,
                 "run the plain-loop CPU reference backend (fp32, slow) instead of the fast path");
  // without kv_flags the verb runs the cluster, whose ranks take --threads-per-rank and the
  // default attention forms: these two reach its --single-rank runner only
  const std::string single_rank = kv_flags ? "" : " (--single-rank only)";
  cmd.add_option("--threads", opts.threads, "CPU threads for the fast path (0: all cores)" + single_rank)
    ->check(CLI::Range(0, 1024));
  cmd
    .add_option("--attention", opts.attention,
                "MLA form: prefill-naive (naive for prompt tokens, absorbed for decode steps, as DeepSeek "
                "serves V3), naive or absorbed (every token)" +
                  single_rank)
    ->check(CLI::IsMember({"prefill-naive", "naive", "absorbed"}));
  add_weight_options(cmd, opts.weights);
  if (!kv_flags)
    return;
  cmd.add_option("--kv-blocks", opts.kv_blocks, "KV cache blocks (0: enough for --max-context)")
    ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd.add_option("--page-size,--block-size", opts.block_size, "tokens per KV block (as the topology verbs)")
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd.add_option("--max-context", opts.max_context, "tokens one sequence may hold")
    ->check(CLI::Range(int64_t{2}, int64_t{1} << 22));
}

std::unique_ptr<model_session> load_model(const session_options& opts, bool need_tokenizer) {
  auto s = std::make_unique<model_session>();
  s->weights = load_weights(opts.model_dir, opts.weights, opts.reference);
  const std::filesystem::path tok_file = std::filesystem::path(opts.model_dir) / "tokenizer.json";
  if (std::filesystem::exists(tok_file))
    s->tok = tokenizer::load(opts.model_dir);
  else if (need_tokenizer)
    throw input_error(tok_file.string() + " not found: this verb needs the model's tokenizer");
  return s;
}

std::unique_ptr<model_session> open_session(const session_options& opts, bool need_tokenizer) {
  auto s = load_model(opts, need_tokenizer);
  s->device = make_cpu_backend(opts.reference, opts.threads);
  const model_config& cfg = s->weights.config;
  const int64_t context = std::min(opts.max_context, cfg.max_position_embeddings);
  const int64_t blocks = opts.kv_blocks ? opts.kv_blocks : (context + opts.block_size - 1) / opts.block_size;
  require_kv_memory(1, cfg.num_hidden_layers, blocks, opts.block_size, cfg.kv_cache_dim(), "--kv-blocks");
  s->cache = std::make_unique<kv_cache>(cfg.num_hidden_layers, blocks, opts.block_size, cfg.kv_cache_dim());
  forward_options fwd;
  if (opts.attention != "prefill-naive")
    fwd.attention = attention_forms::all(opts.attention == "naive" ? attention_form::naive
                                                                   : attention_form::absorbed);
  fwd.ep = opts.ep;
  s->runner = std::make_unique<model_runner>(s->weights, *s->device, *s->cache, fwd);
  return s;
}

served_checkpoint load_for_serving(const std::string& dir, const topology_config& topo,
                                   const weight_options& opts, bool reference, const std::string& verb) {
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
    throw input_error(dir + "/tokenizer.json not found: " + verb + " needs the model's tokenizer");
  validate_for_model(topo, load_model_config(dir));
  return {.weights = std::make_shared<const model_weights>(load_weights(dir, opts, reference)),
          .tok = tokenizer::load(dir)};
}

}  // namespace moe::tools
