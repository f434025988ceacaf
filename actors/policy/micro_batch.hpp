// actors/policy/micro_batch.hpp
// Splitting a prefill batch into two micro-batches of equal cost; a prompt may be split between
// them (DeepSeek profile-data: "the same prompt may be split"). The cost of a token is its linear
// work (projections, experts) plus its core attention (one unit per key it attends to).
#pragma once

#include <array>
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
/// or routed top-k + shared experts, the router), per key 2 x heads x (qk + v head dims) per layer.
[[nodiscard]] step_cost step_cost_of(const model_config& c) noexcept;

/// A run of new tokens of one request: positions [start, start + num_tokens).
struct prefill_segment {
  int64_t request_idx = 0;
  int64_t start = 0;                        // absolute position of the first token
  int64_t num_tokens = 0;
};

/// Causal attention cost of a segment: sum over its tokens of (position + 1) keys.
[[nodiscard]] double attention_cost(const prefill_segment& s) noexcept;

/// A segment's cost: per_token x tokens + per_key x attention_cost.
[[nodiscard]] double segment_cost(const prefill_segment& s, const step_cost& cost) noexcept;

/// Two micro-batches whose costs are as equal as a token boundary allows. Segments keep their
/// order; at most one segment is split (its first part in micro-batch 0). A batch of one token
/// puts it in micro-batch 0 and leaves micro-batch 1 empty.
[[nodiscard]] std::array<std::vector<prefill_segment>, 2> split_micro_batches(
    const std::vector<prefill_segment>& batch, const step_cost& cost = {});

}  // namespace moe
