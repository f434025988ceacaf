// tools/lib/model_session.hpp
// What the single-rank verbs (generate, logits, bench-model) share: a checkpoint opened and
// loaded, its tokenizer, a backend chosen once, and a KV cache sized for the work.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/checkpoint/checkpoint.hpp"
#include "kernels/model/forward.hpp"
#include "config/topology.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe::tools {

/// How a verb loads the weights: where their bytes live, and what is quantised at load.
struct weight_options {
  bool mmap = false;         // map the files instead of copying into huge pages
  bool lm_head_fp8 = false;  // quantise a non-FP8 lm_head to FP8 at load
};

/// Adds --mmap-weights (weight_memory::mmap instead of the default copy) and --lm-head-fp8.
void add_weight_options(CLI::App& cmd, weight_options& opts);

/// Opens the checkpoint `dir` and loads its weights as `opts` say, laid out for the fast path
/// unless `reference`; throws input_error with a clear message on bad input.
[[nodiscard]] model_weights load_weights(const std::string& dir, const weight_options& opts, bool reference);

/// A checkpoint to serve on a topology: its weights and its tokenizer.
struct served_checkpoint {
  std::shared_ptr<const model_weights> weights;
  std::shared_ptr<const tokenizer> tok;
};

/// Checks, before minutes of loading, that `dir` has its tokenizer and that the topology fits
/// the model, then loads both (input_error naming `verb` otherwise).
[[nodiscard]] served_checkpoint load_for_serving(const std::string& dir, const topology_config& topo,
                                                 const weight_options& opts, bool reference,
                                                 const std::string& verb);

struct session_options {
  std::string model_dir;
  bool reference = false;  // plain-loop CPU reference instead of the fast path
  int threads = 0;         // 0: all cores
  int64_t kv_blocks = 0;   // 0: enough for max_context tokens
  int64_t block_size = 64;
  int64_t max_context = 8192;               // tokens one sequence may hold
  std::string attention = "prefill-naive";  // or "naive", "absorbed" (every token)
  ep_precision ep;                          // routed-expert payload types (as expert parallelism)
  weight_options weights;
};

/// Adds --model, --threads, --attention, the weight options to a verb, --reference (fast path by default) or, when
/// reference_by_default, --fast, and unless kv_flags is false --kv-blocks, --block-size, --max-context.
void add_session_options(CLI::App& cmd, session_options& opts, bool reference_by_default = false,
                         bool kv_flags = true);

struct model_session {
  model_weights weights;
  std::shared_ptr<const tokenizer> tok;  // null when the model dir has no tokenizer.json
  std::unique_ptr<backend> device;
  std::unique_ptr<kv_cache> cache;
  std::unique_ptr<model_runner> runner;
};

/// Opens the checkpoint, loads the weights and the tokenizer only (no backend, no KV cache).
[[nodiscard]] std::unique_ptr<model_session> load_model(const session_options& opts, bool need_tokenizer);

/// Opens and loads everything; throws input_error with a clear message on bad input.
[[nodiscard]] std::unique_ptr<model_session> open_session(const session_options& opts, bool need_tokenizer);

}  // namespace moe::tools
