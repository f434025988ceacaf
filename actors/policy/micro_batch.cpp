// actors/policy/micro_batch.cpp
#include "actors/policy/micro_batch.hpp"

#include <cmath>

namespace moe {

double attention_cost(const prefill_segment& s) noexcept {
  // sum_{p=start}^{start+n-1} (p + 1) = n * (2 * start + n + 1) / 2
  return static_cast<double>(s.num_tokens) * static_cast<double>(2 * s.start + s.num_tokens + 1) / 2.0;
}

std::array<std::vector<prefill_segment>, 2> split_micro_batches(const std::vector<prefill_segment>& batch) {
  double total = 0.0;
  for (const prefill_segment& s : batch)
    total += attention_cost(s);
  const double half = total / 2.0;
  std::array<std::vector<prefill_segment>, 2> out;
  double acc = 0.0;
  size_t i = 0;
  for (; i < batch.size(); ++i) {
    const prefill_segment& s = batch[i];
    const double c = attention_cost(s);
    if (acc + c <= half) {
      out[0].push_back(s);
      acc += c;
      continue;
    }
    // split s after k tokens, k chosen so acc + cost(first k) is closest to half
    int64_t best_k = 0;
    double best_gap = std::fabs(acc - half);
    for (int64_t k = 1; k <= s.num_tokens; ++k) {
      const double gap = std::fabs(acc + attention_cost({s.request_idx, s.start, k}) - half);
      if (gap <= best_gap) {                                 // ties: more tokens in micro-batch 0
        best_gap = gap;
        best_k = k;
      }
    }
    if (best_k > 0)
      out[0].push_back({s.request_idx, s.start, best_k});
    if (best_k < s.num_tokens)
      out[1].push_back({s.request_idx, s.start + best_k, s.num_tokens - best_k});
    ++i;
    break;
  }
  for (; i < batch.size(); ++i)
    out[1].push_back(batch[i]);
  return out;
}

}  // namespace moe
