// kernels/cpu/norm.cpp
// RMSNorm (model-spec 5.2), fp32.
#include <cmath>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// x: rows of `dim` values `stride` apart, weight: [dim] -> out: same layout as x
void cpu_reference_backend::rms_norm(const rms_norm_params& p) {
  const int64_t stride = p.stride ? p.stride : p.dim;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const float* x = p.x + t * stride;
    float* out = p.out + t * stride;
    double sum_sq = 0.0;  // mean of squares over dim
    for (int64_t i = 0; i < p.dim; ++i)
      sum_sq += static_cast<double>(x[i]) * x[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / p.dim + p.eps));
    for (int64_t i = 0; i < p.dim; ++i)
      out[i] = x[i] * inv_rms * p.weight[i];
  }
}

}  // namespace moe
