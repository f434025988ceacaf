// actors/policy/rank_picker.cpp
#include "actors/policy/rank_picker.hpp"

#include <algorithm>
#include <limits>

namespace moe {

namespace {

// The first rank from `next` on (cyclic) that `ok` accepts; nullopt when none does.
template <class Ok>
std::optional<int64_t> next_in_turn(size_t n, int64_t next, Ok ok) {
  if (n == 0)
    return std::nullopt;
  const size_t start = static_cast<size_t>(next < 0 ? 0 : next) % n;
  for (size_t k = 0; k < n; ++k)
    if (const size_t r = (start + k) % n; ok(static_cast<int64_t>(r)))
      return static_cast<int64_t>(r);
  return std::nullopt;
}

// What a rank's running requests are a share of: the largest limit or count (+1) of any rank.
int64_t request_scale(const std::vector<decode_load>& loads) {
  int64_t max_running = 1;
  for (const decode_load& l : loads)
    max_running = std::max({max_running, l.max_running, l.num_running + 1});
  return max_running;
}

// The decode score of rank r after adding the request (lower is better).
double decode_score(const std::vector<decode_load>& loads, int64_t num_blocks_needed,
                    const decode_balancer_settings& s, int64_t max_running, int64_t r) {
  const decode_load& l = loads[static_cast<size_t>(r)];
  const double kv_share = static_cast<double>(l.num_used_blocks + num_blocks_needed) / l.num_blocks;
  const double request_share = static_cast<double>(l.num_running + 1) / max_running;
  return s.kv_weight * kv_share + s.request_weight * request_share;
}

}  // namespace

int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached) {
  return pick_prefill_rank(loads, num_uncached, {.num_ranks = static_cast<int64_t>(loads.size())}, 0);
}

int64_t pick_prefill_rank(const std::vector<prefill_load>& loads, int64_t num_uncached,
                          const prefill_balancer_settings& s, int64_t next) {
  const auto works = [&](int64_t r) { return takes_work(s.drained, r) && loads[static_cast<size_t>(r)].up; };
  if (s.policy == "round_robin")
    return next_in_turn(loads.size(), next, works).value_or(0);
  const double cost = static_cast<double>(num_uncached) * static_cast<double>(num_uncached);
  double total_cost = cost, total_tokens = static_cast<double>(num_uncached);
  for (const prefill_load& l : loads) {
    total_cost += l.attention_cost;
    total_tokens += static_cast<double>(l.num_tokens);
  }
  const double n = static_cast<double>(loads.size());
  const double mean_cost = std::max(total_cost / n, 1e-12), mean_tokens = std::max(total_tokens / n, 1e-12);
  int64_t best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < loads.size(); ++r) {
    if (!works(static_cast<int64_t>(r)))
      continue;
    const double tokens = static_cast<double>(loads[r].num_tokens + num_uncached);
    const double score = s.policy == "least_tokens"
                           ? tokens
                           : std::max(s.attention_weight * (loads[r].attention_cost + cost) / mean_cost,
                                      s.token_weight * tokens / mean_tokens);
    if (best < 0 || score < best_score) {
      best_score = score;
      best = static_cast<int64_t>(r);
    }
  }
  return std::max<int64_t>(best, 0);
}

bool has_room(const decode_load& l, int64_t num_blocks_needed) {
  const bool has_blocks = l.num_blocks - l.num_used_blocks >= num_blocks_needed;
  const bool has_slot = l.max_running == 0 || l.num_running < l.max_running;
  return has_blocks && has_slot && l.num_blocks > 0 && l.up;
}

std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads, int64_t num_blocks_needed) {
  std::mt19937_64 unused;
  return pick_decode_rank(loads, num_blocks_needed, {.num_ranks = static_cast<int64_t>(loads.size())}, 0,
                          unused);
}

int64_t better_of_two(const std::vector<decode_load>& loads, int64_t num_blocks_needed,
                      const decode_balancer_settings& s, int64_t a, int64_t b) {
  const int64_t scale = request_scale(loads);
  const double sa = decode_score(loads, num_blocks_needed, s, scale, a);
  const double sb = decode_score(loads, num_blocks_needed, s, scale, b);
  if (sa != sb)
    return sa < sb ? a : b;
  return std::min(a, b);
}

std::optional<int64_t> pick_decode_rank(const std::vector<decode_load>& loads, int64_t num_blocks_needed,
                                        const decode_balancer_settings& s, int64_t next,
                                        std::mt19937_64& rng) {
  const auto fits = [&](int64_t r) {
    return takes_work(s.drained, r) && has_room(loads[static_cast<size_t>(r)], num_blocks_needed);
  };
  if (s.policy == "round_robin")
    return next_in_turn(loads.size(), next, fits);
  if (s.policy == "power_of_two") {
    std::vector<int64_t> open;
    for (size_t r = 0; r < loads.size(); ++r)
      if (fits(static_cast<int64_t>(r)))
        open.push_back(static_cast<int64_t>(r));
    if (open.size() < 2)
      return open.empty() ? std::nullopt : std::optional<int64_t>(open[0]);
    const size_t i = std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng);
    size_t j = std::uniform_int_distribution<size_t>(0, open.size() - 2)(rng);
    j += j >= i ? 1 : 0;  // distinct from i
    return better_of_two(loads, num_blocks_needed, s, open[i], open[j]);
  }
  std::optional<int64_t> best;
  double best_score = std::numeric_limits<double>::infinity();
  const int64_t scale = request_scale(loads);
  for (size_t r = 0; r < loads.size(); ++r) {
    if (!fits(static_cast<int64_t>(r)))
      continue;
    const double score = decode_score(loads, num_blocks_needed, s, scale, static_cast<int64_t>(r));
    if (score < best_score) {
      best_score = score;
      best = static_cast<int64_t>(r);
    }
  }
  return best;
}

}  // namespace moe
