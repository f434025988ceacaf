// kernels/cpu/rope.cpp
// Interleaved-pair rotary embedding (model-spec 5.3): pair (2i, 2i+1) turns by pos * inv_freq[i].
#include <cmath>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

void cpu_reference_backend::rope(const rope_params& p) {
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const double pos = p.positions[t];
    for (int64_t i = 0; i < p.rope_dim / 2; ++i) {
      const double angle = pos * static_cast<double>(p.inv_freq[i]);  // fp64: exact for long contexts
      const float c = static_cast<float>(std::cos(angle)) * p.attention_factor;
      const float s = static_cast<float>(std::sin(angle)) * p.attention_factor;
      for (int64_t h = 0; h < p.num_heads; ++h) {
        float* v = p.x + t * p.token_stride + h * p.head_stride;
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace moe
