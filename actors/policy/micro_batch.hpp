// actors/policy/micro_batch.hpp
// Splitting a prefill batch into two micro-batches of equal core-attention cost; a prompt may
// be split between them (DeepSeek profile-data: "the same prompt may be split").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace moe {

/// A run of new tokens of one request: positions [start, start + num_tokens).
struct prefill_segment {
  int64_t request_idx = 0;
  int64_t start = 0;                        // absolute position of the first token
  int64_t num_tokens = 0;
};

/// Causal attention cost of a segment: sum over its tokens of (position + 1) keys.
[[nodiscard]] double attention_cost(const prefill_segment& s) noexcept;

/// Two micro-batches whose attention costs are as equal as a token boundary allows. Segments
/// keep their order; at most one segment is split (its first part in micro-batch 0). A batch of
/// one token puts it in micro-batch 0 and leaves micro-batch 1 empty.
[[nodiscard]] std::array<std::vector<prefill_segment>, 2> split_micro_batches(
    const std::vector<prefill_segment>& batch);

}  // namespace moe
