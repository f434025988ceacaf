// actors/rank/rank_model.hpp
// What a rank computes with: the shared (read-only) weights, its own backend, KV pool and
// runner. Touched only from the rank's stream.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "actors/policy/micro_batch.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/forward.hpp"

namespace moe {

struct rank_model_config {
  bool reference = false;  // CPU reference backend instead of the fast path
  int num_threads = 0;
  int64_t num_kv_blocks = 256;
  int64_t block_size = 64;
  int64_t max_context = 8192;
  int64_t chunk_size = 512;           // prefill tokens per sequence per step
  int64_t max_prefill_tokens = 4096;  // prefill tokens per step (all sequences)
  bool synchronous_stream = false;    // cpu_stream's synchronous mode: a group of one only
  std::vector<int> cpus;  // --pin-threads: the stream's thread on cpus[0], the kernels' workers on
                          // the rest (config/thread_split.hpp's assign_cpus); empty: not pinned
};

struct rank_model {
  rank_model(std::shared_ptr<const model_weights> w, const rank_model_config& cfg)
      : weights(std::move(w)), config(cfg),
        device(make_cpu_backend(cfg.reference, cfg.num_threads, cfg.cpus)),
        cache(weights->config.num_hidden_layers, cfg.num_kv_blocks, cfg.block_size,
              weights->config.kv_cache_dim()),
        runner(*weights, *device, cache, {.attention = forms}),
        prefill_cost(step_cost_of(weights->config, forms.prefill == attention_form::absorbed)),
        decode_cost(step_cost_of(weights->config, forms.decode == attention_form::absorbed)) {}

  /// Longest sequence (prompt + output) this rank accepts.
  [[nodiscard]] int64_t max_context() const noexcept {
    return std::min(
      {config.max_context, weights->config.max_position_embeddings, cache.num_blocks() * cache.block_size()});
  }

  std::shared_ptr<const model_weights> weights;
  rank_model_config config;
  std::unique_ptr<backend> device;
  kv_cache cache;
  model_runner runner;
  static constexpr attention_forms forms{};  // the runner's and the step pipeline's: the defaults
  step_cost prefill_cost, decode_cost;       // a token's cost in each form, for balancing micro-batches
};

}  // namespace moe
