// kernels/cpu/fast_linear.hpp
// The fast path's matmul core: out rows [r0, r0 + nr) of y = x @ W^T for a set of activation rows,
// one call per task. Two kernels sit behind it, summing each output in the same order (one fp32
// lane adding vdpbf16ps pair products column pair after column pair), so that a row's numbers do
// not depend on how many rows share its call (uses_gemm):
//   GEMV over FP8 panels (<= 8 rows, fast_gemv_panels.cpp): the weight streams from memory once
//     per call at 1 B per weight, expanded in registers.
//   GEMM (fast_gemm.cpp): 64 weight rows at a time in a bf16 panel [K/2][64][2], then 6x64
//     register tiles over all activation rows, so each weight is read once per call and reused
//     from L2. BF16 weights are packed once ahead (linear_weight::gemm_panels,
//     prepare_fast_weights), so their GEMV is the GEMM's tile reading the panels from memory;
//     FP8 ones are expanded per call. The tiles are AVX512-BF16 (vdpbf16ps) for fewer than
//     fma_min_rows rows, else fp32 FMAs on the panel widened to fp32 (fast_gemm_fma.cpp, twice
//     the peak on this project's machines), which give the same bits.
// Activations are rounded to bf16 at the kernel inputs, accumulation is fp32.
// FP8 block scales go on the partial sums, as DeepSeek's FP8 GEMM applies them: a row's products
// over each 128-column scale block are summed from zero, and the block sums are added in order
// as out = fma(block sum, scale_inv[row block, column block] * 2^64, out), under MXCSR's FTZ and
// DAZ (flush_subnormals) in every kernel. So an activation row is rounded once per matmul, not
// once per scale row block, and weights are never rounded. Both FP8 kernels expand e4m3 by a bit
// permutation 2^120 too small (subnormal codes read as zero) against activations rounded as
// bf16(x * 2^56).
// F32 and F16 weights use an fp32 dot-product kernel (no rounding of weights or activations).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/fast_simd.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/weights.hpp"

MOE_FAST_TARGET_BEGIN

namespace moe::fast {

/// Activation rows above which FP8 panels use the GEMM kernel instead of the GEMV one.
inline constexpr int64_t gemv_max_rows = 8;
/// Output rows per GEMM panel.
inline constexpr int64_t panel_rows = 64;

/// FP8 GEMV and GEMM run on bf16 weights 2^fp8_scaled_shift too small (fp8x64_to_bf16_scaled) against
/// activations 2^fp8_gemv_act_shift too large, so products stay clear of fp32's subnormals (products
/// of an activation and an e4m3 value below 2^-62 are dropped) and activations of up to 2^72 fit.
inline constexpr int fp8_gemv_act_shift = 56;
/// The factors on either side: into the activations, and onto each block's scale (2^(120 - 56)).
inline constexpr float fp8_gemv_act_factor = 72057594037927936.0f;     // 2^56
inline constexpr float fp8_gemv_out_factor = 18446744073709551616.0f;  // 2^64
static_assert(fp8_gemv_act_factor == float(uint64_t{1} << fp8_gemv_act_shift));
static_assert(fp8_gemv_out_factor ==
              2.0f * float(uint64_t{1} << (fp8_scaled_shift - fp8_gemv_act_shift - 1)));

/// The activation rows of one matmul: `num_rows` rows of `k` fp32 values, and optionally the
/// same rows already rounded to bf16 and zero-padded to round_up(k, 32) (GEMM inputs).
struct act_rows {
  int64_t num_rows = 0;
  int64_t k = 0;
  const float* const* f32 = nullptr;      // [num_rows] -> k floats
  const uint16_t* const* bf16 = nullptr;  // [num_rows] -> round_up(k, 32) bf16, or null
  const float* const* fma = nullptr;      // [num_rows] -> round_up(k, 16) f32_row_to_fma_pairs, or null
  float factor = 1.0f;                    // what bf16 / fma were multiplied by before rounding
};

/// Per-thread working memory of the kernels.
struct thread_scratch {
  scratch_buffer panel;  // packed weight panel
  scratch_buffer act;    // activations converted to bf16
  scratch_buffer act_ptrs;
  scratch_buffer tile_a, tile_b;                     // callers' output tiles (experts, attention)
  scratch_buffer rows_a, rows_b;                     // callers' row-pointer lists
  scratch_buffer attn_q, attn_o, attn_ptrs;          // fused attention tasks
  scratch_buffer attn_state, attn_chunk, attn_rows;  // attend's key chunks (fast_attend.hpp)
  scratch_buffer fma_act, fma_act_ptrs, fma_panel, fma_tile_ptrs;  // the FMA tiles' fp32 inputs
};

/// True when the fast kernels handle `w` (else callers use the reference).
[[nodiscard]] bool fast_supports(const linear_weight& w) noexcept;

/// True when `num_rows` activation rows go through the GEMM kernel for weight `w`: BF16 and
/// row-major FP8 weights always (from pre-packed panels, a BF16 GEMV is the GEMM's tile itself),
/// FP8 panels past gemv_max_rows. So every bf16/fp8 kernel sums a row's products in the GEMM's
/// order, and a token's numbers do not depend on how many rows share its call: how a topology
/// batches tokens (micro-batches, ranks, expert counts) must not change them.
[[nodiscard]] inline bool uses_gemm(const linear_weight& w, int64_t num_rows) noexcept {
  if (w.type == dtype::bf16 || (w.type == dtype::f8_e4m3 && w.layout == weight_layout::row_major))
    return true;
  return w.type == dtype::f8_e4m3 && num_rows > gemv_max_rows;
}

/// out[m * ldo + (r - r0)] = sum_k x[m][k] * W[r][k] for m < x.num_rows, r in [r0, r0 + nr).
void linear_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out, int64_t ldo,
                 thread_scratch& s);

/// What the kernels multiply a weight's activations by before rounding them to bf16:
/// fp8_gemv_act_factor for FP8 weights, else 1 (exact: a power of two).
[[nodiscard]] float act_factor(const linear_weight& w) noexcept;

/// The activation rows as bf16 zero-padded to round_up(k, 32), times act_factor(w): x.bf16 when
/// given with that factor, else converted into s.act.
[[nodiscard]] const uint16_t* const* bf16_rows(const act_rows& x, const linear_weight& w, thread_scratch& s);

/// uint16 values one packed panel of a weight with `k` input features holds (fast_weights.hpp).
[[nodiscard]] int64_t panel_size(int64_t k) noexcept;

// The kernels behind linear_rows.
void gemm_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out, int64_t ldo,
               thread_scratch& s);
void gemv_rows_f32(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                   int64_t ldo);
/// Activation rows a GEMM register tile holds at most.
inline constexpr int64_t gemm_tile_rows = 6;
/// f(i, m0, mr) for the GEMM's register tiles over `rows` activation rows: near-equal tiles of
/// at most gemm_tile_rows, tile i holding rows [m0, m0 + mr) (32 rows: 6 6 5 5 5 5, not
/// 6 6 6 6 6 2). The vdpbf16ps and the FMA tiles split rows the same way.
template <class F>
void for_each_row_tile(int64_t rows, F f) {
  const int64_t tiles = (rows + gemm_tile_rows - 1) / gemm_tile_rows;
  for (int64_t i = 0, m0 = 0; i < tiles; ++i) {
    const int64_t mr = rows / tiles + (i < rows % tiles ? 1 : 0);
    f(i, m0, mr);
    m0 += mr;
  }
}
/// Activation rows from which the GEMM runs its tiles in fp32 FMAs (fast_gemm_fma.cpp), not
/// vdpbf16ps: the same bits, twice the peak, once the panel's widening is shared by enough rows.
inline constexpr int64_t fma_min_rows = 16;
/// The activation rows as fma_panel_tiles reads them (f32_row_to_fma_pairs), times act_factor(w):
/// x.fma when given with that factor, else converted into s.
[[nodiscard]] const float* const* fma_rows(const act_rows& x, const linear_weight& w, thread_scratch& s);

/// An FP8 panel's scales: one per block of `pairs` column pairs (the scale row block's
/// scale_inv row), applied to the block sums (fp8_block_sum). Null `scales`: a BF16 panel, one
/// sum over all pairs.
struct kblock_scales {
  const float* scales = nullptr;
  int64_t pairs = 0;
};
/// The scales of the weight row block holding output row `row`; none for BF16.
[[nodiscard]] kblock_scales kblock_scales_for(const linear_weight& w, int64_t row) noexcept;
/// out = fma(block sum, scale * fp8_gemv_out_factor, out): the one way every FP8 kernel adds a
/// block's sum into a row's output (out starts at +0), under flush_subnormals (so a scale below
/// 2^-126 reads as zero; real checkpoints' are far above it).
[[nodiscard]] inline __m512 fp8_block_sum(__m512 sum, float scale, __m512 out) noexcept {
  return _mm512_fmadd_ps(sum, _mm512_set1_ps(scale * fp8_gemv_out_factor), out);
}

/// For the scope, MXCSR as vdpbf16ps behaves whatever the caller's: round to nearest even, every
/// exception masked, flush-to-zero and denormals-are-zero. The FMA tiles run under it, and every
/// FP8 kernel adds its block sums under it, so all of them give the same bits.
class flush_subnormals {
 public:
  flush_subnormals() noexcept : saved_(_mm_getcsr()) { _mm_setcsr((saved_ & ~0x6000u) | 0x9fc0u); }
  ~flush_subnormals() { _mm_setcsr(saved_); }
  flush_subnormals(const flush_subnormals&) = delete;
  flush_subnormals& operator=(const flush_subnormals&) = delete;

 private:
  unsigned saved_;
};

/// out[m * ldo + j] = sum_kp dot(a pair kp, panel[kp][j]) for m < rows, j < n (BF16), or in
/// blocks of kb.pairs pairs added by fp8_block_sum (FP8): the vdpbf16ps tile's sums
/// bit for bit, in fp32 FMAs over the bf16 panel [kp][64][2] widened a chunk at a time. `next`:
/// the bytes the caller's next panel is made from (may be empty), prefetched into L2 while this
/// one computes.
void fma_panel_tiles(const float* const* a, int64_t rows, const uint16_t* panel, int64_t num_kp, float* out,
                     int64_t ldo, int64_t n, kblock_scales kb, std::span<const char> next, thread_scratch& s);
/// FP8 weights in weight_layout::fp8_panels, few rows (fast_gemv_panels.cpp).
void gemv_rows_fp8_panels(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                          int64_t ldo, thread_scratch& s);

}  // namespace moe::fast

MOE_FAST_TARGET_END
