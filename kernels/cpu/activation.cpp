// kernels/cpu/activation.cpp
// SwiGLU's silu(gate) * up, and residual adds.
#include <cmath>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// gate, up: [num_tokens, dim] -> out: [num_tokens, dim]
void cpu_reference_backend::silu_mul(const silu_mul_params& p) {
  for (int64_t i = 0; i < p.num_tokens * p.dim; ++i) {
    const float g = p.gate[i];
    p.out[i] = g / (1.0f + std::exp(-g)) * p.up[i];
  }
}

void cpu_reference_backend::add(const add_params& p) {
  for (int64_t i = 0; i < p.n; ++i)
    p.out[i] += p.x[i];
}

}  // namespace moe
