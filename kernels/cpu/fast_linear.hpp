// kernels/cpu/fast_linear.hpp
// The fast path's matmul core: out rows [r0, r0 + nr) of y = x @ W^T for a set of activation rows,
// one call per task. Two shapes of kernel sit behind it:
//   GEMV (<= 8 rows, fast_gemv.cpp): vdpbf16ps dot products straight off the stored weight rows,
//     so every weight byte streams from memory once per call at its stored width (BF16 2 B,
//     FP8 1 B expanded in registers by a byte-table lookup), with software prefetch.
//   GEMM (more rows, fast_gemm.cpp): 64 weight rows at a time packed into a bf16 panel
//     [K/2][64][2] (FP8 expanded exactly), then 6x64 AVX512-BF16 register tiles over all
//     activation rows, so each weight is read once per call and reused from L2. Panels are
//     packed per call (~25-45 % of a 32-64-row GEMM's time), except for a BF16 weight packed
//     once ahead (linear_weight::gemm_panels: the lm_head, which runs in every batched decode step).
// Activations are rounded to bf16 at the kernel inputs, accumulation is fp32.
// FP8 block scales go on the activations: for output rows in scale row block b, the inputs are
// x[k] * scale_inv[b, k / 128] rounded to bf16, so weights are never rounded.
// F32 and F16 weights use an fp32 dot-product kernel (no rounding of weights or activations).
#pragma once

#include <cstdint>

#include "kernels/cpu/fast_simd.hpp"
#include "kernels/cpu/gemm_panels.hpp"
#include "kernels/model/weights.hpp"

namespace moe::fast {

/// Activation rows above which bf16 / fp8 weights use the GEMM kernel instead of the GEMV one.
inline constexpr int64_t gemv_max_rows = 8;
/// Output rows per GEMM panel.
inline constexpr int64_t panel_rows = 64;

/// The activation rows of one matmul: `num_rows` rows of `k` fp32 values, and optionally the
/// same rows already rounded to bf16 and zero-padded to round_up(k, 32) (GEMM inputs).
struct act_rows {
  int64_t num_rows = 0;
  int64_t k = 0;
  const float* const* f32 = nullptr;        // [num_rows] -> k floats
  const uint16_t* const* bf16 = nullptr;    // [num_rows] -> round_up(k, 32) bf16, or null
};

/// Per-thread working memory of the kernels.
struct thread_scratch {
  scratch_buffer panel;                     // packed weight panel
  scratch_buffer act;                       // activations converted to bf16
  scratch_buffer act_ptrs;
  scratch_buffer tile_a, tile_b;            // callers' output tiles (experts, attention)
  scratch_buffer rows_a, rows_b;            // callers' row-pointer lists
  scratch_buffer attn_q, attn_o, attn_ptrs; // fused attention tasks
};

/// True when the fast kernels handle `w` (else callers use the reference).
[[nodiscard]] bool fast_supports(const linear_weight& w) noexcept;

/// True when `num_rows` activation rows go through the GEMM kernel for weight `w`.
[[nodiscard]] inline bool uses_gemm(const linear_weight& w, int64_t num_rows) noexcept {
  return (w.type == dtype::bf16 || w.type == dtype::f8_e4m3) && num_rows > gemv_max_rows;
}

/// out[m * ldo + (r - r0)] = sum_k x[m][k] * W[r][k] for m < x.num_rows, r in [r0, r0 + nr).
void linear_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                 int64_t ldo, thread_scratch& s);

/// The activation rows as bf16 zero-padded to round_up(k, 32): x.bf16 when given and `w` is
/// BF16, else converted into s.act (FP8: times the scales of weight row block `row_block`).
[[nodiscard]] const uint16_t* const* bf16_rows(const act_rows& x, const linear_weight& w,
                                               int64_t row_block, thread_scratch& s);

/// uint16 values one packed panel of a weight with `k` input features holds (gemm_panels.hpp).
[[nodiscard]] int64_t panel_size(int64_t k) noexcept;

// The kernels behind linear_rows.
void gemv_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
               int64_t ldo, thread_scratch& s);
void gemm_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
               int64_t ldo, thread_scratch& s);
void gemv_rows_f32(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                   int64_t ldo);
/// FP8 weights in weight_layout::fp8_panels (fast_gemv_panels.cpp); gemv_rows sends them there.
void gemv_rows_fp8_panels(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                          int64_t ldo, thread_scratch& s);

/// FP8 GEMV runs on bf16 weights 2^fp8_scaled_shift too small (fp8x64_to_bf16_scaled) against
/// activations 2^fp8_gemv_act_shift too large, so products stay clear of fp32's subnormals (true
/// products below 2^-62 are dropped) and activations of up to 2^72 x scale fit.
inline constexpr int fp8_gemv_act_shift = 56;
/// The factors on either side: into the activations, and out of the sums (2^(120 - 56)).
inline constexpr float fp8_gemv_act_factor = 72057594037927936.0f;        // 2^56
inline constexpr float fp8_gemv_out_factor = 18446744073709551616.0f;     // 2^64
static_assert(fp8_gemv_act_factor == float(uint64_t{1} << fp8_gemv_act_shift));
static_assert(fp8_gemv_out_factor == 2.0f * float(uint64_t{1} << (fp8_scaled_shift - fp8_gemv_act_shift - 1)));

}  // namespace moe::fast
