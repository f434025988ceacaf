// kernels/cuda/moe_gate.hpp
// The noaux_tc router on the GPU (model-spec 5.7): the launcher's arguments, its launch shape
// and the per-warp body shared by the kernel (moe_gate.cu) and the host emulation in tests/cuda/.
// C++17, no project headers (see norm.hpp for why).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/simt.hpp"

namespace moe::cuda {

/// Same fields and meaning as moe::moe_gate_params, on device pointers.
struct moe_gate_args {
  const float* logits = nullptr;  // [num_tokens, num_experts]
  const float* bias = nullptr;    // [num_experts] or null
  int32_t* topk_ids = nullptr;    // [num_tokens, top_k]
  float* topk_weights = nullptr;  // [num_tokens, top_k]
  int64_t num_tokens = 0;
  int64_t num_experts = 0;
  int64_t num_groups = 1;
  int64_t topk_group = 1;
  int64_t top_k = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

inline constexpr int64_t moe_gate_max_experts = 2048;
inline constexpr int64_t moe_gate_max_smem_bytes = 48 * 1024;

/// Shared floats one warp (one token) uses: s [E], c [E], group score [G], group kept [G].
[[nodiscard]] constexpr int64_t moe_gate_smem_floats_per_warp(int64_t num_experts,
                                                              int64_t num_groups) noexcept {
  return 2 * num_experts + 2 * num_groups;
}

/// Warps (tokens) per block: up to 4, as shared memory allows.
[[nodiscard]] constexpr int moe_gate_warps_per_block(int64_t num_experts, int64_t num_groups) noexcept {
  const int64_t per_warp = moe_gate_smem_floats_per_warp(num_experts, num_groups) * 4;
  const int64_t fit = moe_gate_max_smem_bytes / per_warp;
  return fit >= 4 ? 4 : (fit < 1 ? 1 : static_cast<int>(fit));
}

/// One warp routes token t; `smem` holds moe_gate_smem_floats_per_warp floats.
/// Output order: by biased score c descending, ties to the lower expert index. Weights are the
/// unbiased scores s of the chosen experts, divided by (their sum + 1e-20) when norm_topk_prob
/// and top_k > 1 (model-spec 5.7), times routed_scaling_factor; summed in output order.
template <class Simt>
MOE_SIMT_FN void moe_gate_token(const Simt& simt, const moe_gate_args& a, int64_t t, int lane, float* smem) {
  const int num_experts = static_cast<int>(a.num_experts);
  const int num_groups = static_cast<int>(a.num_groups);
  const int group_size = num_experts / num_groups;
  float* s = smem;             // sigmoid(logit), the weights
  float* c = s + num_experts;  // s + bias, for choosing only; -inf once excluded
  float* group_score = c + num_experts;
  float* group_kept = group_score + num_groups;

  const float* logits = a.logits + t * a.num_experts;
  for (int e = lane; e < num_experts; e += warp_size) {
    const float score = 1.0f / (1.0f + expf(-logits[e]));
    s[e] = score;
    c[e] = a.bias == nullptr ? score : score + a.bias[e];
  }
  simt.sync_warp();

  if (num_groups > 1) {
    // Group score: the sum of the two largest c in the group (one group per lane).
    for (int g = lane; g < num_groups; g += warp_size) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float v = c[e];
        if (v > top1) {
          top2 = top1;
          top1 = v;
        } else if (v > top2) {
          top2 = v;
        }
      }
      group_score[g] = group_size == 1 ? top1 : top1 + top2;
      group_kept[g] = 0.0f;
    }
    simt.sync_warp();
    // Keep the topk_group best groups, ties to the lower group index.
    for (int k = 0; k < a.topk_group; ++k) {
      float best = -INFINITY;
      int best_group = INT_MAX;
      for (int g = lane; g < num_groups; g += warp_size)
        if (group_kept[g] == 0.0f && (group_score[g] > best || best_group == INT_MAX)) {
          best = group_score[g];
          best_group = g;
        }
      warp_best(simt, best, best_group);
      if (lane == 0)
        group_kept[best_group] = 1.0f;
      simt.sync_warp();
    }
    // Every expert of a dropped group: -inf (not 0; model-spec 5.7).
    for (int e = lane; e < num_experts; e += warp_size)
      if (group_kept[e / group_size] == 0.0f)
        c[e] = -INFINITY;
    simt.sync_warp();
  }

  // top_k by c, one arg-max per pick; the pick leaves the race as -inf. The launcher ensures
  // top_k <= the experts of the kept groups, so a finite candidate always remains.
  int32_t* ids = a.topk_ids + t * a.top_k;
  float* weights = a.topk_weights + t * a.top_k;
  float sum = 0.0f;
  for (int k = 0; k < a.top_k; ++k) {
    float best = -INFINITY;
    int best_expert = INT_MAX;
    for (int e = lane; e < num_experts; e += warp_size)
      if (c[e] > best || best_expert == INT_MAX) {
        best = c[e];
        best_expert = e;
      }
    warp_best(simt, best, best_expert);
    sum += s[best_expert];
    if (lane == 0) {
      ids[k] = best_expert;
      weights[k] = s[best_expert];
      c[best_expert] = -INFINITY;
    }
    simt.sync_warp();
  }
  if (lane == 0) {
    const float denom = a.norm_topk_prob && a.top_k > 1 ? sum + 1e-20f : 1.0f;
    for (int k = 0; k < a.top_k; ++k)
      weights[k] = weights[k] / denom * a.routed_scaling_factor;
  }
}

/// Block `block` of `warps_per_block` warps: warp w routes token block * warps_per_block + w.
template <class Simt>
MOE_SIMT_FN void moe_gate_block(const Simt& simt, const moe_gate_args& a, int64_t block, int thread,
                                int warps_per_block, float* smem) {
  const int warp = thread / warp_size;
  const int64_t t = block * warps_per_block + warp;
  if (t >= a.num_tokens)
    return;  // the whole warp leaves together
  moe_gate_token(simt, a, t, thread % warp_size,
                 smem + warp * moe_gate_smem_floats_per_warp(a.num_experts, a.num_groups));
}

}  // namespace moe::cuda
