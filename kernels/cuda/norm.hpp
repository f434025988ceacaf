// kernels/cuda/norm.hpp
// RMSNorm on the GPU (model-spec 5.2): the launcher's arguments, its launch shape and the
// per-block body shared by the kernel (norm.cu) and the host emulation in tests/cuda/.
// C++17, no project headers: kernels/backend.hpp is C++20, so the backend converts
// rms_norm_params into rms_norm_args (kernels/cuda/cuda_backend.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/simt.hpp"

namespace moe::cuda {

/// Same fields and meaning as moe::rms_norm_params, on device pointers.
/// y = x / sqrt(mean(x^2) + eps) * weight per row; rows of `dim` values `stride` apart in both
/// x and out (stride 0 -> dim); out may equal x.
struct rms_norm_args {
  const float* x = nullptr;
  const float* weight = nullptr;  // [dim]
  float* out = nullptr;
  int64_t num_tokens = 0;
  int64_t dim = 0;
  int64_t stride = 0;
  float eps = 1e-6f;
};

inline constexpr int rms_norm_max_threads = 1024;

/// Threads per block: about 8 values per thread, a multiple of 32, 32..1024.
[[nodiscard]] constexpr int rms_norm_threads(int64_t dim) noexcept {
  constexpr int64_t max_warps = rms_norm_max_threads / warp_size;
  const int64_t warps = (dim + 8 * warp_size - 1) / (8 * warp_size);
  return static_cast<int>(warps < 1 ? 1 : (warps > max_warps ? max_warps : warps)) * warp_size;
}

/// One block normalises row `row` with `num_threads` threads. `partials`: shared memory for
/// num_threads / 32 floats. In place is safe: each thread writes only the elements it read,
/// and only after the block-wide barrier inside block_sum.
template <class Simt>
MOE_SIMT_FN void rms_norm_row(const Simt& simt, const rms_norm_args& a, int64_t row, int thread,
                              int num_threads, float* partials) {
  const int64_t stride = a.stride == 0 ? a.dim : a.stride;
  const float* x = a.x + row * stride;
  float* out = a.out + row * stride;
  float sum_sq = 0.0f;
  for (int64_t i = thread; i < a.dim; i += num_threads)
    sum_sq += x[i] * x[i];
  sum_sq = block_sum(simt, sum_sq, thread, num_threads, partials);
  // eps inside the sqrt; IEEE sqrt and division (no fast math), as the CPU reference.
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(a.dim) + a.eps);
  for (int64_t i = thread; i < a.dim; i += num_threads)
    out[i] = x[i] * inv_rms * a.weight[i];
}

}  // namespace moe::cuda
