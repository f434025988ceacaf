// kernels/cpu/fast_gemv_f32.cpp
// The fp32 kernel for F32 / F16 weights, any number of activation rows: dot products of 4 weight
// rows x 4 activation rows, 16 lanes per step; neither weights nor activations are rounded.
#include <algorithm>

#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {
namespace {

constexpr int group_rows = 4;  // weight rows per register tile

template <dtype T>
[[nodiscard]] inline __m512 load_f32(const void* row, int64_t k, __mmask16 mask) noexcept {
  if constexpr (T == dtype::f32)
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + k);
  else
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + k));
}

template <dtype T, int NT>
void dot_group_f32(const void* const rows[group_rows], const float* const* a, int64_t k,
                   float out[group_rows][4]) noexcept {
  __m512 acc[group_rows][NT];
  for (auto& row : acc)
    for (auto& v : row)
      v = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask = k - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - i)) - 1);
    __m512 w[group_rows];
    for (int r = 0; r < group_rows; ++r)
      w[r] = load_f32<T>(rows[r], i, mask);
    for (int t = 0; t < NT; ++t) {
      const __m512 av = _mm512_maskz_loadu_ps(mask, a[t] + i);
      for (int r = 0; r < group_rows; ++r)
        acc[r][t] = _mm512_fmadd_ps(av, w[r], acc[r][t]);
    }
  }
  for (int r = 0; r < group_rows; ++r)
    for (int t = 0; t < NT; ++t)
      out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
}

template <dtype T>
void gemv_rows_f32_typed(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                         int64_t ldo) {
  const int64_t row_bytes = x.k * dtype_size(T);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t g = r0; g < r0 + nr; g += group_rows) {
    const int64_t n = std::min<int64_t>(group_rows, r0 + nr - g);
    const void* rows[group_rows];
    for (int r = 0; r < group_rows; ++r)
      rows[r] = base + (g + std::min<int64_t>(r, n - 1)) * row_bytes;
    for (int64_t m0 = 0; m0 < x.num_rows; m0 += 4) {
      const int nt = static_cast<int>(std::min<int64_t>(4, x.num_rows - m0));
      float res[group_rows][4] = {};
      switch (nt) {
        case 1: dot_group_f32<T, 1>(rows, x.f32 + m0, x.k, res); break;
        case 2: dot_group_f32<T, 2>(rows, x.f32 + m0, x.k, res); break;
        case 3: dot_group_f32<T, 3>(rows, x.f32 + m0, x.k, res); break;
        default: dot_group_f32<T, 4>(rows, x.f32 + m0, x.k, res); break;
      }
      for (int t = 0; t < nt; ++t)
        for (int64_t r = 0; r < n; ++r)
          out[(m0 + t) * ldo + (g - r0 + r)] = res[r][t];
    }
  }
}

}  // namespace

void gemv_rows_f32(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                   int64_t ldo) {
  if (w.type == dtype::f32)
    gemv_rows_f32_typed<dtype::f32>(x, w, r0, nr, out, ldo);
  else
    gemv_rows_f32_typed<dtype::f16>(x, w, r0, nr, out, ldo);
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
