// kernels/cpu/fast_linear.cpp
// Which kernel a matmul task goes to (fast_linear.hpp), and the activation rows as its kernels read
// them: bf16 (vdpbf16ps) or fp32 pairs (FMA tiles).
#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {

float act_factor(const linear_weight& w) noexcept {
  return w.type == dtype::f8_e4m3 ? fp8_gemv_act_factor : 1.0f;
}

kblock_scales kblock_scales_for(const linear_weight& w, int64_t row) noexcept {
  if (w.type != dtype::f8_e4m3)
    return {};
  return {.scales = w.scale_inv + row / w.block_rows * ((w.in_features + w.block_cols - 1) / w.block_cols),
          .pairs = w.block_cols / 2};
}

// x's rows times act_factor(w), converted by convert(src, k, dst, factor) into rows of `lda` T in
// buf.
template <class T, class Convert>
const T* const* converted_rows(const act_rows& x, const linear_weight& w, int64_t lda, scratch_buffer& buf,
                               scratch_buffer& ptrs, Convert convert) {
  auto* rows = buf.get<T>(x.num_rows * lda);
  auto** out = ptrs.get<const T*>(x.num_rows);
  for (int64_t m = 0; m < x.num_rows; ++m) {
    convert(x.f32[m], x.k, rows + m * lda, act_factor(w));
    out[m] = rows + m * lda;
  }
  return out;
}

const uint16_t* const* bf16_rows(const act_rows& x, const linear_weight& w, thread_scratch& s) {
  if (x.bf16 && x.factor == act_factor(w))
    return x.bf16;
  return converted_rows<uint16_t>(x, w, round_up(x.k, 32), s.act, s.act_ptrs, f32_row_to_bf16);
}

const float* const* fma_rows(const act_rows& x, const linear_weight& w, thread_scratch& s) {
  if (x.fma && x.factor == act_factor(w))
    return x.fma;
  return converted_rows<float>(x, w, round_up(x.k, 16), s.fma_act, s.fma_act_ptrs, f32_row_to_fma_pairs);
}

bool fast_supports(const linear_weight& w) noexcept {
  switch (w.type) {
    case dtype::f32:
    case dtype::f16:
    case dtype::bf16: return true;
    case dtype::f8_e4m3:
      return w.scale_inv != nullptr && w.block_cols % 32 == 0 && w.block_rows > 0 &&
             (w.layout == weight_layout::row_major ||
              (w.in_features % 64 == 0 && w.block_rows % fp8_panel_rows == 0));
    default: return false;
  }
}

void linear_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out, int64_t ldo,
                 thread_scratch& s) {
  if (w.type == dtype::f32 || w.type == dtype::f16)
    gemv_rows_f32(x, w, r0, nr, out, ldo);
  else if (uses_gemm(w, x.num_rows))
    gemm_rows(x, w, r0, nr, out, ldo, s);
  else
    gemv_rows_fp8_panels(x, w, r0, nr, out, ldo, s);
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
