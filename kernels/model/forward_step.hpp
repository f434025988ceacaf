// kernels/model/forward_step.hpp
// One forward step over a flattened batch, advanced layer by layer in the stages of DeepSeek's
// decode pipeline (docs/reference/deepseek-system.md §1.2), so a runtime can interleave two
// micro-batches and run routed experts on the ranks that own them. model_runner::forward is
// these stages run in a row with every expert local.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/model/forward.hpp"

namespace moe {

class forward_step {
 public:
  /// Flattens `batch` (checks token ids and reserved KV) and embeds its tokens.
  forward_step(const model_weights& weights, backend& device, kv_cache& cache, const rope_tables& rope,
               std::span<const batch_entry> batch);

  [[nodiscard]] int64_t num_tokens() const noexcept { return static_cast<int64_t>(token_ids_.size()); }

  /// ATTN-0: input RMSNorm, q and latent-KV projections, RoPE, latent KV into the cache.
  void attn_0(int64_t layer_idx);
  /// ATTN-1: core attention, o_proj, residual add, post-attention RMSNorm, and the router on
  /// MoE layers (topk_ids / topk_weights valid afterwards). On the last layer the step first
  /// keeps only its logit rows (a prefill's last token per prompt, none for a segment without
  /// logits): that layer's output is read nowhere else, and its latent KV is already stored, so
  /// num_tokens() and every [T, ...] buffer shrink to those rows from here on. Each sequence's
  /// attention in its entry's form (attention_forms: the decode form on the last layer).
  void attn_1(int64_t layer_idx, attention_forms forms);
  /// SHARED: the shared experts (MoE layers) or the whole dense MLP (dense layers).
  void shared(int64_t layer_idx);
  /// MLP with every routed expert local: inputs through the dispatch payload type, weighted
  /// expert outputs through the combine payload type, summed over k in order.
  void routed_local(int64_t layer_idx, ep_precision ep = {});
  /// COMBINE: h += routed output + shared output; the layer is done.
  void combine(int64_t layer_idx);

  /// What dispatch sends for a MoE layer: normalised inputs [T, D] and routing [T, K].
  [[nodiscard]] std::span<const float> moe_input() const noexcept { return x_; }
  [[nodiscard]] std::span<const int32_t> topk_ids() const noexcept { return topk_ids_; }
  [[nodiscard]] std::span<const float> topk_weights() const noexcept { return topk_weights_; }
  /// Where combine reads the routed output [T, D] (filled by routed_local or by the runtime).
  [[nodiscard]] std::span<float> routed_output() noexcept { return routed_; }
  /// The residual stream h [T, D].
  [[nodiscard]] std::span<const float> hidden() const noexcept { return h_; }

  /// Final RMSNorm and lm_head on the selected rows -> [num_rows, vocab]; advances each
  /// sequence's num_cached to the end of its new tokens. Every stage is a no-op on an empty
  /// batch (an idle rank still takes part in expert parallelism).
  [[nodiscard]] std::vector<float> logits();

  /// logits() of several steps (micro-batches of one step) with one pass over lm_head: on a
  /// memory-bound CPU the head's weights are read once instead of once per micro-batch. Row-wise
  /// the same numbers as each step's logits() on the reference backend.
  [[nodiscard]] static std::vector<std::vector<float>> joint_logits(std::span<forward_step* const> steps);

 private:
  const model_weights& w_;
  backend& b_;
  kv_cache& cache_;
  const rope_tables& rope_;
  std::span<const batch_entry> batch_;
  // the flattened batch
  std::vector<int32_t> token_ids_, seq_idx_, positions_;
  std::vector<attention_form> seq_form_;  // per entry, set by attn_1
  std::vector<const int32_t*> block_tables_;
  std::vector<int64_t> logit_rows_;
  std::vector<int64_t> ends_;  // per entry: position after its last new token
  // activations
  std::vector<float> h_, x_, q_, kv_, attn_, shared_, routed_;  // [T, ...]
  std::vector<float> router_logits_, topk_weights_;
  std::vector<int32_t> topk_ids_;

  [[nodiscard]] token_layout layout() const noexcept;
  /// Drops every token but the logit rows (kept in order; see attn_1).
  void keep_logit_rows();
  /// The hidden rows logits are taken of, [num_logit_rows, hidden], appended to `out`.
  void append_logit_rows(std::vector<float>& out) const;
  void advance_kv();
};

}  // namespace moe
