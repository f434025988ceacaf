// actors/policy/rank_picker.hpp
// The prefill and decode load balancers' choice of rank, as pure functions over per-rank load
// (DeepSeek's objectives, docs/reference/deepseek-system.md §1.3).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace moe {

/// What a prefill rank has queued: core-attention cost and input tokens not yet prefilled.
struct prefill_load {
  double attention_cost = 0.0;  // sum over queued prompts of uncached_len^2
  int64_t num_tokens = 0;       // queued uncached input tokens (dispatch send load)
};

/// The prefill rank that keeps both objectives most even after adding a prompt with
/// `num_uncached` tokens: minimises the larger of its attention-cost share and token share
/// (each relative to the mean over ranks after the assignment); ties -> lower rank.
[[nodiscard]] int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached);

/// What a decode rank holds: KV blocks in use, capacity, and running requests.
struct decode_load {
  int64_t num_used_blocks = 0;
  int64_t num_blocks = 0;
  int64_t num_running = 0;
  int64_t max_running = 0;  // 0: unlimited
};

/// The decode rank for a request needing `num_blocks_needed` KV blocks: among ranks with room
/// (free blocks and a running slot), the one minimising KV usage share + request share after
/// the assignment; ties -> lower rank. nullopt when no rank has room.
[[nodiscard]] std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads,
                                                      int64_t num_blocks_needed);

}  // namespace moe
