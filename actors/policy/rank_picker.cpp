// actors/policy/rank_picker.cpp
#include "actors/policy/rank_picker.hpp"

#include <algorithm>
#include <limits>

namespace moe {

int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached) {
  const double cost = static_cast<double>(num_uncached) * static_cast<double>(num_uncached);
  double total_cost = cost, total_tokens = static_cast<double>(num_uncached);
  for (const prefill_load& l : loads) {
    total_cost += l.attention_cost;
    total_tokens += static_cast<double>(l.num_tokens);
  }
  const double n = static_cast<double>(loads.size());
  const double mean_cost = std::max(total_cost / n, 1e-12), mean_tokens = std::max(total_tokens / n, 1e-12);
  int64_t best = 0;
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < loads.size(); ++r) {
    const double score = std::max((loads[r].attention_cost + cost) / mean_cost,
                                  static_cast<double>(loads[r].num_tokens + num_uncached) / mean_tokens);
    if (score < best_score) {
      best_score = score;
      best = static_cast<int64_t>(r);
    }
  }
  return best;
}

std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads, int64_t num_blocks_needed) {
  std::optional<int64_t> best;
  double best_score = std::numeric_limits<double>::infinity();
  int64_t max_running = 1;
  for (const decode_load& l : loads)
    max_running = std::max({max_running, l.max_running, l.num_running + 1});
  for (size_t r = 0; r < loads.size(); ++r) {
    const decode_load& l = loads[r];
    const bool has_blocks = l.num_blocks - l.num_used_blocks >= num_blocks_needed;
    const bool has_slot = l.max_running == 0 || l.num_running < l.max_running;
    if (!has_blocks || !has_slot || l.num_blocks <= 0)
      continue;
    const double kv_share = static_cast<double>(l.num_used_blocks + num_blocks_needed) / l.num_blocks;
    const double request_share = static_cast<double>(l.num_running + 1) / max_running;
    if (kv_share + request_share < best_score) {
      best_score = kv_share + request_share;
      best = static_cast<int64_t>(r);
    }
  }
  return best;
}

}  // namespace moe
