// actors/policy/micro_batch.cpp
#include "actors/policy/micro_batch.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace moe {

double attention_cost(const prefill_segment& s) noexcept {
  // sum_{p=start}^{start+n-1} (p + 1) = n * (2 * start + n + 1) / 2
  return static_cast<double>(s.num_tokens) * static_cast<double>(2 * s.start + s.num_tokens + 1) / 2.0;
}

step_cost step_cost_of(const model_config& c, bool absorbed) noexcept {
  const auto d = static_cast<double>(c.hidden_size), heads = static_cast<double>(c.num_attention_heads);
  const auto qk = static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim),
             v = static_cast<double>(c.v_head_dim);
  const auto kv = static_cast<double>(c.kv_lora_rank);
  const double q = c.q_lora_rank ? d * static_cast<double>(*c.q_lora_rank) +
                                     static_cast<double>(*c.q_lora_rank) * heads * qk
                                 : d * heads * qk;
  const double attention = q + d * (kv + static_cast<double>(c.qk_rope_head_dim)) +
                           kv * heads * (static_cast<double>(c.qk_nope_head_dim) + v) + heads * v * d;
  double per_token = 0.0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const double ffn = c.is_moe_layer(l)
                         ? 3.0 * d * static_cast<double>(c.moe_intermediate_size) *
                               static_cast<double>(c.num_experts_per_tok + c.n_shared_experts) +
                             d * static_cast<double>(c.n_routed_experts)
                         : 3.0 * d * static_cast<double>(c.intermediate_size);
    per_token += 2.0 * (attention + ffn);
  }
  const double key = absorbed ? 2.0 * kv + static_cast<double>(c.qk_rope_head_dim) : qk + v;
  return {.per_token = per_token, .per_key = 2.0 * heads * key * static_cast<double>(c.num_hidden_layers)};
}

double segment_cost(const prefill_segment& s, const step_cost& cost) noexcept {
  return cost.per_token * static_cast<double>(s.num_tokens) + cost.per_key * attention_cost(s);
}

std::array<std::vector<prefill_segment>, 2> split_micro_batches(const std::vector<prefill_segment>& batch,
                                                                const step_cost& cost, double first_share) {
  if (!(first_share > 0.0 && first_share < 1.0))
    throw std::invalid_argument("split_micro_batches: first_share must be in (0, 1), got " +
                                std::to_string(first_share));
  double total = 0.0;
  for (const prefill_segment& s : batch)
    total += segment_cost(s, cost);
  const double target = total * first_share;
  std::array<std::vector<prefill_segment>, 2> out;
  double acc = 0.0;
  size_t i = 0;
  for (; i < batch.size(); ++i) {
    const prefill_segment& s = batch[i];
    const double c = segment_cost(s, cost);
    if (acc + c <= target) {
      out[0].push_back(s);
      acc += c;
      continue;
    }
    // split s after k tokens, k chosen so acc + cost(first k) is closest to the target
    int64_t best_k = 0;
    double best_gap = std::fabs(acc - target);
    for (int64_t k = 1; k <= s.num_tokens; ++k) {
      const double gap = std::fabs(acc + segment_cost({s.request_idx, s.start, k}, cost) - target);
      if (gap <= best_gap) {  // ties: more tokens in micro-batch 0
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

std::vector<std::vector<size_t>> split_decode_batch(const std::vector<int64_t>& keys, const step_cost& cost,
                                                    int64_t num_micro_batches) {
  if (num_micro_batches < 1)
    throw std::invalid_argument("split_decode_batch: num_micro_batches must be at least 1, got " +
                                std::to_string(num_micro_batches));
  std::vector<std::vector<size_t>> out(static_cast<size_t>(num_micro_batches));
  std::vector<double> load(out.size(), 0.0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto mb = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[mb] += cost.per_token + cost.per_key * static_cast<double>(keys[i]);
    out[mb].push_back(i);
  }
  return out;
}

}  // namespace moe
