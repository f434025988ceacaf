// kernels/cpu/fast_linear.cpp
// Which kernel a matmul task goes to (fast_linear.hpp), and the activation rows as its kernels read
// them: bf16 (vdpbf16ps) or fp32 pairs (FMA tiles).
#include "kernels/cpu/fast_linear.hpp"

namespace moe::fast {

namespace {

// What the activations are multiplied by before rounding for weight row block `row_block`: the
// FP8 block scales of that row (one per w.block_cols columns) times fp8_gemv_act_factor.
struct act_scaling {
  const float* scales = nullptr;
  float factor = 1.0f;
};

[[nodiscard]] act_scaling scaling_for(const linear_weight& w, int64_t row_block) noexcept {
  if (w.type != dtype::f8_e4m3)
    return {};
  return {.scales = w.scale_inv + row_block * ((w.in_features + w.block_cols - 1) / w.block_cols),
          .factor = fp8_gemv_act_factor};
}

}  // namespace

// x's rows converted by convert(src, k, dst, scales, block, factor) into rows of `lda` T in buf.
template <class T, class Convert>
const T* const* converted_rows(const act_rows& x, const linear_weight& w, int64_t row_block, int64_t lda,
                               scratch_buffer& buf, scratch_buffer& ptrs, Convert convert) {
  auto* rows = buf.get<T>(x.num_rows * lda);
  auto** out = ptrs.get<const T*>(x.num_rows);
  const act_scaling sc = scaling_for(w, row_block);
  for (int64_t m = 0; m < x.num_rows; ++m) {
    convert(x.f32[m], x.k, rows + m * lda, sc.scales, w.block_cols, sc.factor);
    out[m] = rows + m * lda;
  }
  return out;
}

const uint16_t* const* bf16_rows(const act_rows& x, const linear_weight& w, int64_t row_block,
                                 thread_scratch& s) {
  if (w.type == dtype::bf16 && x.bf16)
    return x.bf16;
  return converted_rows<uint16_t>(x, w, row_block, round_up(x.k, 32), s.act, s.act_ptrs, f32_row_to_bf16);
}

const float* const* fma_rows(const act_rows& x, const linear_weight& w, int64_t row_block, thread_scratch& s) {
  if (w.type == dtype::bf16 && x.fma)
    return x.fma;
  return converted_rows<float>(x, w, row_block, round_up(x.k, 16), s.fma_act, s.fma_act_ptrs, f32_row_to_fma_pairs);
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
