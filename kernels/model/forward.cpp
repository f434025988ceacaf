// kernels/model/forward.cpp
// The single-rank forward pass: the stages of forward_step run in a row, every expert local.
#include "kernels/model/forward.hpp"

#include <algorithm>
#include <string>

#include "kernels/model/forward_step.hpp"

namespace moe {

model_runner::model_runner(const model_weights& weights, backend& device, kv_cache& cache,
                           forward_options options)
    : w_(weights), b_(device), cache_(cache), options_(std::move(options)),
      rope_(make_rope_tables(weights.config)) {}

std::vector<float> model_runner::forward(std::span<const batch_entry> batch) {
  forward_step step(w_, b_, cache_, rope_, batch);
  for (int64_t layer_idx = 0; layer_idx < w_.config.num_hidden_layers; ++layer_idx) {
    step.attn_0(layer_idx);
    step.attn_1(layer_idx, options_.attention);
    step.shared(layer_idx);
    if (w_.layers[layer_idx].is_moe)
      step.routed_local(layer_idx, options_.ep);
    step.combine(layer_idx);
    if (options_.observe_layer)
      options_.observe_layer(layer_idx, step.hidden());
  }
  return step.logits();
}

std::vector<float> model_runner::prefill(std::span<const int32_t> prompt, sequence_kv& kv, int64_t chunk_size,
                                         bool all_logits) {
  const int64_t n = static_cast<int64_t>(prompt.size()), start = kv.num_cached;
  chunk_size = std::max<int64_t>(1, chunk_size);
  if (!kv.reserve(cache_, start + n))
    throw input_error("the KV cache has too few free blocks for a prompt of " + std::to_string(n) +
                      " tokens");
  std::vector<float> logits;
  for (int64_t begin = 0; begin < n; begin += chunk_size) {
    const batch_entry entry{
      .tokens = prompt.subspan(begin, std::min(chunk_size, n - begin)), .kv = &kv, .all_logits = all_logits};
    std::vector<float> part = forward(std::span(&entry, 1));
    if (all_logits)
      logits.insert(logits.end(), part.begin(), part.end());
    else
      logits = std::move(part);
  }
  return logits;
}

}  // namespace moe
