// kernels/cpu/fast_linear.cpp
// Which kernel a matmul task goes to (fast_linear.hpp), and the activation rows as bf16.
#include "kernels/cpu/fast_linear.hpp"

namespace moe::fast {

const uint16_t* const* bf16_rows(const act_rows& x, const linear_weight& w, int64_t row_block,
                                 thread_scratch& s) {
  if (w.type == dtype::bf16 && x.bf16)
    return x.bf16;
  const int64_t lda = round_up(x.k, 32);
  auto* buf = s.act.get<uint16_t>(x.num_rows * lda);
  auto** ptrs = s.act_ptrs.get<const uint16_t*>(x.num_rows);
  const float* scales = nullptr;
  if (w.type == dtype::f8_e4m3)
    scales = w.scale_inv + row_block * ((w.in_features + w.block_cols - 1) / w.block_cols);
  const float factor = w.type == dtype::f8_e4m3 ? fp8_gemv_act_factor : 1.0f;
  for (int64_t m = 0; m < x.num_rows; ++m) {
    f32_row_to_bf16(x.f32[m], x.k, buf + m * lda, scales, w.block_cols, factor);
    ptrs[m] = buf + m * lda;
  }
  return ptrs;
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

void linear_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                 int64_t ldo, thread_scratch& s) {
  if (w.type == dtype::f32 || w.type == dtype::f16)
    gemv_rows_f32(x, w, r0, nr, out, ldo);
  else if (uses_gemm(w, x.num_rows))
    gemm_rows(x, w, r0, nr, out, ldo, s);
  else
    gemv_rows_fp8_panels(x, w, r0, nr, out, ldo, s);
}

}  // namespace moe::fast
