// tools/model_session.cpp
#include "tools/model_session.hpp"

#include <filesystem>

#include "kernels/cpu/fast_weights.hpp"
#include "tools/load_progress.hpp"

namespace moe::tools {

void add_weight_memory_flag(CLI::App& cmd, bool& mmap_weights) {
  cmd.add_flag("--mmap-weights", mmap_weights,
               "map the checkpoint files (one page cache shared with other processes) instead of "
               "copying the weights into transparent huge pages (the default: huge pages on any "
               "file system and kernel, and FP8 weights repacked into the GEMV's panels: much faster "
               "small-batch decode)");
}

void add_session_options(CLI::App& cmd, session_options& opts, bool reference_by_default, bool kv_flags) {
  cmd.add_option("--model", opts.model_dir, "checkpoint directory (config.json, *.safetensors)")
      ->required();
  opts.reference = reference_by_default;
  if (reference_by_default)
    cmd.add_flag_function("--fast", [&opts](int64_t) { opts.reference = false; },
                          "use the fast CPU path (bf16 activations) instead of the fp32 reference");
  else
    cmd.add_flag("--reference", opts.reference,
                 "run the plain-loop CPU reference backend (fp32, slow) instead of the fast path");
  // without kv_flags the verb runs the cluster, whose ranks take --threads-per-rank and absorbed
  // attention: these two reach its --single-rank runner only
  const std::string single_rank = kv_flags ? "" : " (--single-rank only)";
  cmd.add_option("--threads", opts.threads, "CPU threads for the fast path (0: all cores)" + single_rank)
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--attention", opts.attention, "MLA form: absorbed or naive" + single_rank)
      ->check(CLI::IsMember({"absorbed", "naive"}));
  add_weight_memory_flag(cmd, opts.mmap_weights);
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
  // FP8 weights in the fast kernels' panel layout, unless the reference loops run (they read any
  // layout, but as the specification they read the checkpoint's own)
  s->ckpt = checkpoint::open(opts.model_dir, opts.mmap_weights ? weight_memory::mmap : weight_memory::copy,
                             stderr_load_progress(), /*fp8_panels=*/!opts.reference);
  s->weights = load_model_weights(s->ckpt);
  if (!opts.reference)                      // the fast path multiplies BF16 weights from panels
    fast::prepare_fast_weights(s->weights);
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
  const int64_t blocks = opts.kv_blocks ? opts.kv_blocks
                                        : (context + opts.block_size - 1) / opts.block_size;
  require_kv_memory(1, cfg.num_hidden_layers, blocks, opts.block_size, cfg.kv_cache_dim(), "--kv-blocks");
  s->cache = std::make_unique<kv_cache>(cfg.num_hidden_layers, blocks, opts.block_size,
                                        cfg.kv_cache_dim());
  forward_options fwd;
  fwd.form = opts.attention == "naive" ? attention_form::naive : attention_form::absorbed;
  fwd.ep = opts.ep;
  s->runner = std::make_unique<model_runner>(s->weights, *s->device, *s->cache, fwd);
  return s;
}

}  // namespace moe::tools
