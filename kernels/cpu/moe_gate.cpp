// kernels/cpu/moe_gate.cpp
// The noaux_tc router (model-spec 5.7). Selection uses biased scores, weights unbiased ones.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

namespace {

// Indices of the k largest values, largest first; ties -> lower index.
std::vector<int32_t> top_k_indices(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

// logits: [num_tokens, E], bias: [E] -> topk_ids, topk_weights: [num_tokens, top_k]
void cpu_reference_backend::moe_gate(const moe_gate_params& p) {
  const int64_t num_experts = p.num_experts, per_group = num_experts / p.num_groups;
  std::vector<float> scores(num_experts), choice(num_experts), group_scores(p.num_groups);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    for (int64_t e = 0; e < num_experts; ++e) {
      scores[e] = 1.0f / (1.0f + std::exp(-p.logits[t * num_experts + e]));  // sigmoid
      choice[e] = scores[e] + (p.bias ? p.bias[e] : 0.0f);
    }
    for (int64_t g = 0; g < p.num_groups; ++g) {  // group score: sum of its top-2
      std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      float sum = 0.0f;
      for (int32_t i : top_k_indices(members, std::min<int64_t>(2, per_group)))
        sum += members[i];
      group_scores[g] = sum;
    }
    std::vector<uint8_t> kept(p.num_groups, 0);
    for (int32_t g : top_k_indices(group_scores, p.topk_group))
      kept[g] = 1;
    for (int64_t e = 0; e < num_experts; ++e)
      if (!kept[e / per_group])
        choice[e] = -std::numeric_limits<float>::infinity();
    const std::vector<int32_t> chosen = top_k_indices(choice, p.top_k);
    float sum = 0.0f;
    for (int32_t e : chosen)
      sum += scores[e];
    for (int64_t k = 0; k < p.top_k; ++k) {
      float w = scores[chosen[k]];
      if (p.norm_topk_prob && p.top_k > 1)
        w /= sum + 1e-20f;
      p.topk_ids[t * p.top_k + k] = chosen[k];
      p.topk_weights[t * p.top_k + k] = w * p.routed_scaling_factor;
    }
  }
}

}  // namespace moe
