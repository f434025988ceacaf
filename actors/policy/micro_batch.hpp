// actors/policy/micro_batch.hpp
// Splitting a prefill batch into two micro-batches by cost, micro-batch 0 taking a chosen share; a
// prompt may be split between them (DeepSeek profile-data: "the same prompt may be split"). A
// decode batch (one token per request) is dealt out whole requests at a time. The cost of a token
// is its linear work (projections, experts) plus its core attention (one unit per key it attends
// to).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/model_config.hpp"

namespace moe {

/// What one token costs in a forward step, in FLOPs: `per_token` for the projections and experts,
/// `per_key` more for every key it attends to. {0, 1} is the core-attention cost alone.
struct step_cost {
  double per_token = 0.0;
  double per_key = 1.0;
};

/// From the model's shapes: per token 2 x the weights it multiplies (attention projections, dense
/// or routed top-k + shared experts, the router); per key and layer 2 x heads x what a key costs a
/// query head in the form the rank computes: absorbed, scores over the latent and rope key
/// (kv_lora_rank + qk_rope_head_dim) and the weighted sum of latents (kv_lora_rank); naive (the
/// ranks' prompts, rank_model), qk + v head dims. (Counting one form's dims for the other's
/// kernels misjudges core attention 1.8x on the small preset: micro-batch 1, the later tokens,
/// got the longer ATTN-1 at the split the balance meant to be its smaller share.) A prompt split
/// over two micro-batches expands its first part's keys again in the second: not counted.
[[nodiscard]] step_cost step_cost_of(const model_config& c, bool absorbed = true) noexcept;

/// A run of new tokens of one request: positions [start, start + num_tokens).
struct prefill_segment {
  int64_t request_idx = 0;
  int64_t start = 0;  // absolute position of the first token
  int64_t num_tokens = 0;
};

/// Causal attention cost of a segment: sum over its tokens of (position + 1) keys.
[[nodiscard]] double attention_cost(const prefill_segment& s) noexcept;

/// A segment's cost: per_token x tokens + per_key x attention_cost.
[[nodiscard]] double segment_cost(const prefill_segment& s, const step_cost& cost) noexcept;

/// The share of a prefill batch's cost that micro-batch 0 takes. Not a half: in the stream program
/// (actors/rank/step_pipeline) micro-batch 1's ATTN stages sit on the exchange's critical loop. Its
/// combine arrives last, and its next dispatch cannot leave before its ATTN is done, while the link
/// has only micro-batch 0's dispatch to carry; when that dispatch is the shorter, the link idles.
/// Micro-batch 0's ATTN runs while micro-batch 1's combine is on the wire, so it can grow; but not
/// far, as micro-batch 0's dispatch has to hide under micro-batch 1's ATTN (and SHARED), and a
/// dispatch grows with tokens while micro-batch 0's tokens are the prompt's cheaper ones (a 0.53
/// cost share was ~0.55 of the tokens in bench-cluster's prefill). With communication about equal
/// to compute and the small preset's prefill stage times (21, 61, 13, 123, 2 ms for ATTN-0, ATTN-1,
/// SHARED, MLP, COMBINE of a layer, 2026-12-01), tools/overlap_model.py (--first-share) hides
/// 92.3 % at one half, 95.3 % at 0.53 and 92.9 % at 0.57, the share chosen before the last layer
/// was cut to the logit rows and the cost counted the absorbed form (7 MoE layers). In
/// bench-cluster --overlap (hidden by waits, 3 alternated runs of 3 rounds each) 0.53 hid 88.3,
/// 96.2 and 94.5 %, 0.57 88.6, 93.5 and 89.4 %. With little communication any share near a half
/// hides all of it. The total work is the same.
inline constexpr double prefill_first_share = 0.53;

/// Two micro-batches, micro-batch 0 taking `first_share` of the cost (a half: equal costs) as
/// closely as a token boundary allows. Segments keep their order; at most one segment is split
/// (its first part in micro-batch 0). A batch of one token puts it in micro-batch 0 and leaves
/// micro-batch 1 empty. Throws std::invalid_argument unless 0 < first_share < 1.
[[nodiscard]] std::array<std::vector<prefill_segment>, 2> split_micro_batches(
  const std::vector<prefill_segment>& batch, const step_cost& cost = {}, double first_share = 0.5);

/// A decode batch's micro-batches: row i (one request's next token, attending to `keys[i]` keys,
/// its cached tokens and itself) costs per_token + per_key x keys[i]. Rows are dealt out greedily
/// in order, each to the micro-batch with the least cost so far (the lowest index on ties), so a
/// request is never split. Returns `num_micro_batches` lists of row indices, each in row order.
/// Throws std::invalid_argument unless num_micro_batches >= 1.
[[nodiscard]] std::vector<std::vector<size_t>> split_decode_batch(const std::vector<int64_t>& keys,
                                                                  const step_cost& cost,
                                                                  int64_t num_micro_batches);

}  // namespace moe
