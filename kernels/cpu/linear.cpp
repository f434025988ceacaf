// kernels/cpu/linear.cpp
// y = x @ W^T with W dequantised row by row (FP8: value * block scale), fp64 accumulation.
#include <vector>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// x: [num_tokens, in] , w: [out, in] -> out: [num_tokens, out]
void cpu_reference_backend::linear(const linear_params& p) {
  const linear_weight& w = *p.w;
  std::vector<float> row(static_cast<size_t>(w.in_features));
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t i = 0; i < w.in_features; ++i)  // dequantise W[o, :]
      row[i] = w.at(o, i);
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      const float* x = p.x + t * w.in_features;
      double acc = 0.0;
      for (int64_t i = 0; i < w.in_features; ++i)
        acc += static_cast<double>(x[i]) * row[i];
      p.out[t * w.out_features + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace moe
