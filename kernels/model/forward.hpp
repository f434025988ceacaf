// kernels/model/forward.hpp
// The DeepSeek-V3 forward pass (docs/reference/model-spec.md §5) built from backend ops over a
// flattened batch of sequences, each appending its new tokens to the paged KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/model/dispatch_payload.hpp"
#include "kernels/model/kv_cache.hpp"
#include "kernels/model/weights.hpp"

namespace moe {

/// Rotation frequencies and scales derived once from the config (model-spec 5.3, 5.4).
struct rope_tables {
  std::vector<float> inv_freq;    // [qk_rope_head_dim / 2], YaRN-blended
  float attention_factor = 1.0f;  // cos/sin multiplier mscale(f, m) / mscale(f, m_all)
  float softmax_scale = 1.0f;     // qk_head_dim^-0.5 * mscale_all_dim-factor^2
};
[[nodiscard]] rope_tables make_rope_tables(const model_config& cfg);

/// One sequence's part of a batch: new tokens at positions `start` onwards.
struct batch_entry {
  std::span<const int32_t> tokens;
  sequence_kv* kv = nullptr;  // must already hold start + tokens.size() tokens
  bool all_logits = false;    // logits for every new token, else only the last
  bool no_logits = false;     // no logits at all (a prompt's non-final segment)
  int64_t start = -1;         // position of tokens[0]; -1: kv->num_cached. A prompt
                              // split over two micro-batches has two entries.
  bool decode = false;        // a decode step's tokens (else a prompt's): its form
};

/// The MLA form of prompt tokens and of decode steps (backend.hpp: attention_form). By default
/// DeepSeek's: naive for prefill, absorbed for decode. A step's last layer runs every sequence in
/// the decode form: only the logit rows are left there (a prompt's last token), and expanding a
/// prompt's keys for one query row costs more than the absorbed form's whole row. The form of a
/// token never depends on how a topology batches it, so neither do its numbers.
struct attention_forms {
  attention_form prefill = attention_form::naive;
  attention_form decode = attention_form::absorbed;

  [[nodiscard]] static constexpr attention_forms all(attention_form f) noexcept { return {f, f}; }
};

struct forward_options {
  attention_forms attention;
  /// What routed-expert inputs and outputs go through, as in expert-parallel dispatch (FP8 in
  /// DeepSeek) and combine (BF16), so a single rank computes what a cluster would. FP32: exact.
  ep_precision ep;
  /// Called after each layer with the residual stream h [num_tokens, hidden] (diagnostics).
  std::function<void(int64_t layer_idx, std::span<const float> hidden)> observe_layer;
};

/// Runs the model over a batch on one backend.
class model_runner {
 public:
  model_runner(const model_weights& weights, backend& device, kv_cache& cache, forward_options options = {});

  /// Appends each entry's tokens to its KV and returns logits [num_rows, vocab]: per entry in
  /// order, every new token's row when all_logits, else the last one's. Advances num_cached.
  [[nodiscard]] std::vector<float> forward(std::span<const batch_entry> batch);

  /// Prefills `prompt` into `kv` (which may already hold earlier tokens) in forward calls of at
  /// most `chunk_size` tokens, so activation memory stays bounded. Returns the last token's
  /// logits [1, vocab], or every token's [prompt, vocab] when all_logits. Throws input_error when
  /// the KV pool has too few free blocks.
  [[nodiscard]] std::vector<float> prefill(std::span<const int32_t> prompt, sequence_kv& kv,
                                           int64_t chunk_size, bool all_logits = false);

  [[nodiscard]] const model_weights& weights() const noexcept { return w_; }
  [[nodiscard]] backend& device() noexcept { return b_; }
  [[nodiscard]] kv_cache& cache() noexcept { return cache_; }

 private:
  const model_weights& w_;
  backend& b_;
  kv_cache& cache_;
  forward_options options_;
  rope_tables rope_;
};

}  // namespace moe
