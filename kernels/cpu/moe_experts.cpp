// kernels/cpu/moe_experts.cpp
// Routed experts token by token: out[t] = sum_k w[t,k] * SwiGLU_{ids[t,k]}(x[t]), k in order.
#include <vector>

#include "kernels/dtype.hpp"

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// x: [num_tokens, hidden] -> out: [num_tokens, hidden]
void cpu_reference_backend::moe_experts(const moe_experts_params& p) {
  std::vector<float> gate, up, y(static_cast<size_t>(p.hidden));
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    float* out = p.out + t * p.hidden;
    std::fill(out, out + p.hidden, 0.0f);
    for (int64_t k = 0; k < p.top_k; ++k) {
      const int32_t e = p.topk_ids[t * p.top_k + k];
      if (e < p.expert_begin || e >= p.expert_end)
        continue;
      const mlp_weights& expert = (*p.experts)[e];
      const int64_t inter = expert.gate_proj.out_features;
      gate.resize(inter);
      up.resize(inter);
      linear({.x = p.x + t * p.hidden, .w = &expert.gate_proj, .out = gate.data(), .num_tokens = 1});
      linear({.x = p.x + t * p.hidden, .w = &expert.up_proj, .out = up.data(), .num_tokens = 1});
      silu_mul({.gate = gate.data(), .up = up.data(), .out = gate.data(), .num_tokens = 1, .dim = inter});
      linear({.x = gate.data(), .w = &expert.down_proj, .out = y.data(), .num_tokens = 1});
      const float w = p.topk_weights[t * p.top_k + k];
      for (int64_t i = 0; i < p.hidden; ++i)
        out[i] += p.round_outputs_bf16 ? bf16_to_f32(f32_to_bf16(w * y[i])) : w * y[i];
    }
  }
}

}  // namespace moe
