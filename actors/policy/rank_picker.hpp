// actors/policy/rank_picker.hpp
// The prefill and decode load balancers' choice of rank, as pure functions over per-rank load
// (DeepSeek's objectives, docs/reference/deepseek-system.md §1.3).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "actors/policy/live_config.hpp"

namespace moe {

/// What a prefill rank has queued: core-attention cost and input tokens not yet prefilled.
struct prefill_load {
  double attention_cost = 0.0;  // sum over queued prompts of uncached_len^2
  int64_t num_tokens = 0;       // queued uncached input tokens (dispatch send load)
  bool up = true;               // false: dead (not yet restarted, or lost with its node): no prompts
};

/// The prefill rank that keeps both objectives most even after adding a prompt with
/// `num_uncached` tokens: minimises the larger of its attention-cost share and token share
/// (each relative to the mean over ranks after the assignment); ties -> lower rank.
[[nodiscard]] int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached);

/// The prefill rank under `s` (actors/policy/live_config.hpp) among the ranks that take work:
/// deepseek as above with the two shares weighted, least_tokens the fewest queued tokens,
/// round_robin the first from `next` on (cyclic); ties -> lower rank.
[[nodiscard]] int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached,
                                        const prefill_balancer_settings& s, int64_t next);

/// What a decode rank holds: KV blocks in use, capacity, and running requests.
struct decode_load {
  int64_t num_used_blocks = 0;
  int64_t num_blocks = 0;
  int64_t num_running = 0;
  int64_t max_running = 0;  // 0: unlimited
  bool up = true;           // false: lost with its node, until the node rejoins (no room)
};

/// The decode rank for a request needing `num_blocks_needed` KV blocks: among ranks with room
/// (free blocks and a running slot), the one minimising KV usage share + request share after
/// the assignment; ties -> lower rank. nullopt when no rank has room.
[[nodiscard]] std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads,
                                                      int64_t num_blocks_needed);

/// Whether decode rank `r` can take a request of `num_blocks_needed` blocks now.
[[nodiscard]] bool has_room(const decode_load& l, int64_t num_blocks_needed);

/// The decode rank under `s` among the ranks with room that take work (nullopt when none):
/// deepseek as above with the two shares weighted; round_robin the first from `next` on
/// (cyclic); power_of_two two distinct ranks drawn with `rng`, the better by the deepseek score
/// (better_of_two), the only one when one has room.
[[nodiscard]] std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads,
                                                      int64_t num_blocks_needed,
                                                      const decode_balancer_settings& s, int64_t next,
                                                      std::mt19937_64& rng);

/// Of decode ranks a and b (both with room), the one with the lower weighted deepseek score;
/// a tie -> the lower index.
[[nodiscard]] int64_t better_of_two(const std::vector<decode_load>& loads, int64_t num_blocks_needed,
                                    const decode_balancer_settings& s, int64_t a, int64_t b);

}  // namespace moe
