// kernels/cpu/fast_gemm_fma.cpp
// The GEMM's register tiles for many activation rows in fp32 FMAs instead of vdpbf16ps, with
// the same sums bit for bit (fast_linear.hpp). On this project's x86 machines a core issues two
// 512-bit vfmadd231ps a cycle but one vdpbf16ps every two (5.3 against 1.27 G/s a core, measured),
// so 64 FLOP a cycle against 32. vdpbf16ps adds a column pair to an fp32 lane as two fused
// multiply-adds, the odd column first, exact bf16 x bf16 products, subnormal inputs and results
// flushed to zero: two vfmadd231ps under MXCSR's DAZ and FTZ give the same bits (checked on 3
// million random lanes, subnormals among them, and by the tests against the vdpbf16ps tile).
// So a panel's bf16 pairs are widened into an fp32 panel with each pair's odd column first, the
// activation rows likewise, and one FMA a column adds them in vdpbf16ps's order.
#include <algorithm>

#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {
namespace {

constexpr int64_t chunk_pairs = 256;  // column pairs widened at a time: 128 KiB of fp32 panel
                                      // (FP8: rounded down to whole scale blocks)

// out[m][j] (+)= sum over the chunk's columns t of a[m][t] * wide[t][j], for m < MR, j < n,
// as the vdpbf16ps tile sums them. BF16 (no scales): starting from zero for the chunk that
// starts the row, else from what the previous chunk stored. FP8: the chunk holds whole scale blocks of kb.pairs pairs (its first one's scale
// at kb.scales[0]), each summed from zero and added into out by fp8_block_sum (out taken as
// zero before the row's first block).
// The chunk's first tile (Widen) makes `wide` as it goes from the chunk's bf16 pairs [kp][64][2]:
// wide[2kp] = the pairs' odd column, wide[2kp + 1] = the even one (a pair's high half is its odd
// column, so masking keeps it and a 16-bit shift moves the even one up; bf16 -> fp32 is exact),
// so that reading the panel overlaps the multiply-adds; it also asks for [pf, pf + pf_bytes)
// into L2 spread over its steps: the bytes of the call's next panel, which would otherwise be
// read from memory while nothing computes.
template <int MR, bool Widen>
void fma_tile(const float* const* a, const uint16_t* pairs, float* wide, int64_t num_kp, float* out,
              int64_t ldo, int64_t n, bool first, kblock_scales kb, const char* pf,
              int64_t pf_bytes) noexcept {
  const int64_t pf_step = Widen ? round_up((pf_bytes + num_kp - 1) / num_kp, 64) : 0;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __mmask16 mask[4];
  for (int j = 0; j < 4; ++j)
    mask[j] = tail_mask16(n - 16 * j);
  const int64_t step = kb.scales ? kb.pairs : num_kp;
  for (int64_t b0 = 0; b0 < num_kp; b0 += step) {  // BF16: one pass
    __m512 acc[MR][4];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < 4; ++j)
        acc[m][j] = first || kb.scales ? _mm512_setzero_ps()
                                       : _mm512_maskz_loadu_ps(mask[j], out + m * ldo + 16 * j);
    for (int64_t kp = b0; kp < std::min(num_kp, b0 + step); ++kp) {
      if constexpr (Widen)
        for (int64_t at = kp * pf_step; at < std::min(pf_bytes, (kp + 1) * pf_step); at += 64)
          _mm_prefetch(pf + at, _MM_HINT_T1);
      for (int64_t t = 2 * kp; t < 2 * kp + 2; ++t) {  // the odd column, then the even one
        float* b = wide + t * panel_rows;
        __m512 bv[4];
        for (int q = 0; q < 4; ++q) {
          if constexpr (Widen) {
            const __m512i v = _mm512_load_si512(pairs + kp * panel_rows * 2 + 32 * q);
            bv[q] = _mm512_castsi512_ps(t == 2 * kp ? _mm512_and_si512(v, high) : _mm512_slli_epi32(v, 16));
            _mm512_store_ps(b + 16 * q, bv[q]);
          } else {
            bv[q] = _mm512_load_ps(b + 16 * q);
          }
        }
        for (int m = 0; m < MR; ++m) {
          const __m512 av = _mm512_set1_ps(a[m][t]);
          for (int q = 0; q < 4; ++q)
            acc[m][q] = _mm512_fmadd_ps(av, bv[q], acc[m][q]);
        }
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < 4; ++j) {
        float* o = out + m * ldo + 16 * j;
        if (kb.scales)
          _mm512_mask_storeu_ps(o, mask[j],
                                fp8_block_sum(acc[m][j], kb.scales[b0 / step],
                                              first && b0 == 0 ? _mm512_setzero_ps()
                                                               : _mm512_maskz_loadu_ps(mask[j], o)));
        else
          _mm512_mask_storeu_ps(o, mask[j], acc[m][j]);
      }
  }
}

template <bool Widen>
void fma_tile_any(int64_t mr, const float* const* a, const uint16_t* pairs, float* wide, int64_t num_kp,
                  float* out, int64_t ldo, int64_t n, bool first, kblock_scales kb, const char* pf,
                  int64_t pf_bytes) noexcept {
  switch (mr) {
#define MOE_FMA_TILE(R) fma_tile<R, Widen>(a, pairs, wide, num_kp, out, ldo, n, first, kb, pf, pf_bytes)
    case 1: MOE_FMA_TILE(1); break;
    case 2: MOE_FMA_TILE(2); break;
    case 3: MOE_FMA_TILE(3); break;
    case 4: MOE_FMA_TILE(4); break;
    case 5: MOE_FMA_TILE(5); break;
    default: MOE_FMA_TILE(6); break;
#undef MOE_FMA_TILE
  }
}

}  // namespace

void fma_panel_tiles(const float* const* a, int64_t rows, const uint16_t* panel, int64_t num_kp, float* out,
                     int64_t ldo, int64_t n, kblock_scales kb, std::span<const char> next,
                     thread_scratch& s) {
  if (num_kp == 0) {  // no inputs: zeros, as the vdpbf16ps tile
    for (int64_t m = 0; m < rows; ++m)
      std::fill_n(out + m * ldo, n, 0.0f);
    return;
  }
  const flush_subnormals flush;
  // FP8: whole scale blocks a chunk
  const int64_t chunk = kb.scales ? std::max<int64_t>(1, chunk_pairs / kb.pairs) * kb.pairs : chunk_pairs;
  auto* wide = s.fma_panel.get<float>(std::min(num_kp, chunk) * 2 * panel_rows);
  auto** tile_a = s.fma_tile_ptrs.get<const float*>(gemm_tile_rows);
  const auto next_bytes = static_cast<int64_t>(next.size());
  for (int64_t kp0 = 0; kp0 < num_kp; kp0 += chunk) {
    const int64_t kp1 = std::min(num_kp, kp0 + chunk);
    const bool first = kp0 == 0;
    const kblock_scales chunk_kb =
      kb.scales ? kblock_scales{.scales = kb.scales + kp0 / kb.pairs, .pairs = kb.pairs} : kb;
    // the chunk's share of the next panel's bytes, fetched during the chunk's first tile
    const int64_t pf0 = next_bytes * kp0 / num_kp, pf1 = next_bytes * kp1 / num_kp;
    const uint16_t* pairs = panel + kp0 * panel_rows * 2;
    for_each_row_tile(rows, [&](int64_t i, int64_t m0, int64_t mr) {
      for (int64_t m = 0; m < mr; ++m)
        tile_a[m] = a[m0 + m] + 2 * kp0;
      float* o = out + m0 * ldo;
      if (i == 0)
        fma_tile_any<true>(mr, tile_a, pairs, wide, kp1 - kp0, o, ldo, n, first, chunk_kb, next.data() + pf0,
                           pf1 - pf0);
      else
        fma_tile_any<false>(mr, tile_a, pairs, wide, kp1 - kp0, o, ldo, n, first, chunk_kb, nullptr, 0);
    });
  }
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
