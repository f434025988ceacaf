// kernels/cpu/fast_backend.cpp
// The fast CPU backend's construction and its linear op: the rows of W split into tasks over the
// thread pool (GEMV: chunks of rows; GEMM: 64-row panels x activation row ranges).
#include "kernels/cpu/fast_backend.hpp"

#include <algorithm>

namespace moe {

using fast::act_rows;
using fast::round_up;

cpu_fast_backend::cpu_fast_backend(int num_threads)
    : pool_(num_threads), scratch_(static_cast<size_t>(pool_.size())) {}

std::unique_ptr<backend> make_cpu_fast_backend(int num_threads) {
  return std::make_unique<cpu_fast_backend>(num_threads);
}

void cpu_fast_backend::parallel_linear(const act_rows& x, const linear_weight& w, float* out,
                                       int64_t ldo) {
  const int64_t n = w.out_features, threads = pool_.size();
  if (fast::uses_gemm(w, x.num_rows)) {
    // Tasks: panel-aligned row ranges x activation row ranges of at least 48 rows, enough of
    // them to balance the threads; each task packs its panels once for all its rows.
    const int64_t num_panels = (n + fast::panel_rows - 1) / fast::panel_rows;
    const int64_t max_m_chunks = std::max<int64_t>(1, x.num_rows / 48);
    const int64_t m_chunks = std::clamp<int64_t>((4 * threads + num_panels - 1) / num_panels, 1, max_m_chunks);
    const int64_t m_chunk = round_up((x.num_rows + m_chunks - 1) / m_chunks, 6);
    const int64_t num_m = (x.num_rows + m_chunk - 1) / m_chunk;
    pool_.parallel_for(num_panels * num_m, [&](int64_t task, int thread) {
      const int64_t p = task / num_m, m0 = (task % num_m) * m_chunk;
      const act_rows part{.num_rows = std::min(m_chunk, x.num_rows - m0), .k = x.k,
                          .f32 = x.f32 + m0, .bf16 = x.bf16 ? x.bf16 + m0 : nullptr};
      const int64_t r0 = p * fast::panel_rows;
      fast::linear_rows(part, w, r0, std::min(fast::panel_rows, n - r0), out + m0 * ldo + r0, ldo,
                        scratch_[thread]);
    });
    return;
  }
  // GEMV: ~2 chunks per thread (dynamic balance), multiples of 16 rows, >= 64 KiB each: long
  // streams, few restarts (measured: 256 x 1024 BF16 26 -> 37 GB/s against 16-row chunks).
  const int64_t row_bytes = x.k * dtype_size(w.type);
  const int64_t min_rows = round_up((int64_t{64} << 10) / row_bytes + 1, 16);
  const int64_t chunk = std::max(min_rows, round_up((n + 2 * threads - 1) / (2 * threads), 16));
  pool_.parallel_for((n + chunk - 1) / chunk, [&](int64_t task, int thread) {
    const int64_t r0 = task * chunk;
    fast::linear_rows(x, w, r0, std::min(chunk, n - r0), out + r0, ldo, scratch_[thread]);
  });
}

// x: [num_tokens, in] -> out: [num_tokens, out]
void cpu_fast_backend::linear(const linear_params& p) {
  const linear_weight& w = *p.w;
  if (!fast::fast_supports(w)) {
    cpu_reference_backend::linear(p);
    return;
  }
  const int64_t m = p.num_tokens, k = w.in_features;
  if (m == 0)
    return;
  auto** f32 = x_ptrs_.get<const float*>(m);
  for (int64_t t = 0; t < m; ++t)
    f32[t] = p.x + t * k;
  act_rows x{.num_rows = m, .k = k, .f32 = f32};
  if (fast::uses_gemm(w, m) && w.type == dtype::bf16) {   // round the activations to bf16 once
    const int64_t lda = round_up(k, 32);
    auto* buf = x_bf16_.get<uint16_t>(m * lda);
    auto** bf16 = x_bf16_ptrs_.get<const uint16_t*>(m);
    pool_.parallel_for((m + 15) / 16, [&](int64_t task, int) {
      for (int64_t t = task * 16; t < std::min(m, task * 16 + 16); ++t) {
        fast::f32_row_to_bf16(p.x + t * k, k, buf + t * lda);
        bf16[t] = buf + t * lda;
      }
    });
    x.bf16 = bf16;
  }
  parallel_linear(x, w, p.out, w.out_features);
}

}  // namespace moe
