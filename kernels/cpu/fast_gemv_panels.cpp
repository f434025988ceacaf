// kernels/cpu/fast_gemv_panels.cpp
// GEMV over FP8 weights in weight_layout::fp8_panels (kernels/dtype.hpp), for few activation
// rows (decode). A panel holds 64 rows column pair by column pair: per pair, two 64-byte loads
// expand (fp8x64_to_bf16_scaled) into the bf16 pairs of rows 0-15, 16-31, 32-47 and 48-63, and one
// vdpbf16ps per 16 rows against the activation pair broadcast from memory adds them in. So no
// activation vectors are loaded per weight byte and no lanes are summed across: lane r of
// accumulator q is row 16q + r, adding the pairs in order, as the GEMM's tile does (fast_gemm.cpp),
// so a row's result is the same bits from either kernel. A row kernel that loaded two activation
// vectors per 64 weight bytes and ended each row in a horizontal sum read ~75 % as fast as a plain
// read of the same bytes from DRAM on two threads, this one ~90 % (and summed in another order).
// Activations and scaling as the GEMM's FP8 path: x times 2^56, rounded to bf16 (natural order),
// against weights 2^120 too small; each 128-column scale block's sums added into the rows'
// outputs by fp8_block_sum with the panel's row block's scales.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {
namespace {

// Activation rows per pass over a panel (4 x 4 accumulators): each pass expands the panel's FP8
// again, so 8 rows take two passes, not four (bench-model --gemm, FP8 at 8 tokens: 5.4-5.8 ->
// 6.3-7.3 GB/s). Every row is summed the same way whatever the number of rows in the call and
// its pass: a row's result must not depend on how a topology batches it (the cluster's
// micro-batches against one rank's whole batch).
constexpr int64_t max_pass_rows = 4;
constexpr int64_t prefetch_bytes = 8192;  // ahead in the task's contiguous panel bytes

// acc[i][q] (lanes: rows 16q .. 16q + 15 of a panel) = a panel's rows dotted with an activation
// row, for NT <= 4 activation rows against NP panels `panel_bytes` apart (NT * NP <= 4; i =
// panel * NT + row), prefetching ahead up to `prefetch_to` (null: none). One accumulator per 16
// rows, as the GEMM's tile: two sets (even and odd column pairs) gave a single row 8
// independent chains instead of 4 but summed in another order, and measured no faster (hot in
// L2: one thread 21-23 GB/s either way, two 34-44 against 31-41; from DRAM the same). Two
// panels at once (one activation row) read two streams at a time, each row still summed in
// order: from DRAM 7-10 % faster than one (two threads, the small preset's dense gate/up and a
// 129280-row lm_head in FP8: 21.0 -> 23.1 and 24.9 -> 26.6 GB/s against a plain read's
// 28.6 and 31.9, alternated in one run); four panels measured no faster than one.
template <int NT, int NP>
void panel_dot(const uint8_t* panel, int64_t panel_bytes, const uint32_t* const* a, int64_t k,
               kblock_scales kb, const char* prefetch_to, __m512 out[max_pass_rows][4]) noexcept {
  static_assert(NT * NP <= max_pass_rows);
  for (int i = 0; i < NT * NP; ++i)
    for (int j = 0; j < 4; ++j)
      out[i][j] = _mm512_setzero_ps();
  const int64_t num_kp = k / 2;  // k % 64 == 0, kb.pairs % 16 == 0: whole steps of two pairs
  for (int64_t b0 = 0; b0 < num_kp; b0 += kb.pairs) {
    __m512 acc[NT * NP][4];
    for (auto& row : acc)
      for (auto& v : row)
        v = _mm512_setzero_ps();
    for (int64_t kp = b0; kp < std::min(num_kp, b0 + kb.pairs); kp += 2) {
      for (int p = 0; p < NP; ++p) {
        // each panel's stream runs on into the same panel of the next pass (NP panels on)
        const int64_t ahead = kp * 128 + prefetch_bytes;
        const char* f = reinterpret_cast<const char*>(
          panel +
          (ahead < panel_bytes ? p * panel_bytes + ahead : (p + NP) * panel_bytes + ahead - panel_bytes));
        if (prefetch_to != nullptr && f < prefetch_to)
          for (int i = 0; i < 4; ++i)
            _mm_prefetch(f + 64 * i, _MM_HINT_T0);
      }
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < NP; ++p) {
          const uint8_t* q = panel + p * panel_bytes + kp * 128 + 128 * h;
          __m512i w[4];
          fp8x64_to_bf16_scaled(_mm512_loadu_si512(q), w[0], w[1]);
          fp8x64_to_bf16_scaled(_mm512_loadu_si512(q + 64), w[2], w[3]);
          for (int m = 0; m < NT; ++m) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[m][kp + h]));
            for (int j = 0; j < 4; ++j)
              acc[p * NT + m][j] = _mm512_dpbf16_ps(acc[p * NT + m][j], av, (__m512bh)w[j]);
          }
        }
    }
    for (int i = 0; i < NT * NP; ++i)
      for (int j = 0; j < 4; ++j)
        out[i][j] = fp8_block_sum(acc[i][j], kb.scales[b0 / kb.pairs], out[i][j]);
  }
}

// out[m * ldo + (r - r0)] for the rows r in [r0, r0 + nr) of `num_panels` consecutive panels
// from row `row0`: sums[p][j] holds panel p's rows 16j .. 16j + 15.
void store_rows(const __m512 sums[][4], int num_panels, int64_t row0, int64_t m, int64_t r0, int64_t nr,
                float* out, int64_t ldo) noexcept {
  for (int p = 0; p < num_panels; ++p)
    for (int64_t j = 0; j < 4; ++j) {
      const int64_t first = row0 + fp8_panel_rows * p + 16 * j;
      const int64_t lo = std::max(r0, first), hi = std::min(r0 + nr, first + 16);
      if (lo >= hi)
        continue;
      alignas(64) float v[16];
      _mm512_store_ps(v, sums[p][j]);
      std::copy(v + (lo - first), v + (hi - first), out + m * ldo + (lo - r0));
    }
}

}  // namespace

void gemv_rows_fp8_panels(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                          int64_t ldo, thread_scratch& s) {
  const int64_t k = x.k, panel_bytes = fp8_panel_rows * k;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t first = r0 / fp8_panel_rows, last = (r0 + nr - 1) / fp8_panel_rows;
  const char* begin = reinterpret_cast<const char*>(base + first * panel_bytes);
  const char* end = reinterpret_cast<const char*>(base + (last + 1) * panel_bytes);
  // the head of each stream: the first panel, and the second when one activation row reads two
  for (int64_t q = 0; q < (x.num_rows == 1 ? 2 : 1); ++q) {
    const char* head = begin + q * panel_bytes;
    for (const char* p = head; p < std::min(end, head + prefetch_bytes); p += 64)
      _mm_prefetch(p, _MM_HINT_T0);
  }
  // the activations rounded once for the call, as column pairs; the block sums under the MXCSR
  // the GEMM's tiles add theirs under
  const auto* const* a = reinterpret_cast<const uint32_t* const*>(bf16_rows(x, w, s));
  const flush_subnormals flush;
  for (int64_t p = first; p <= last; ++p) {
    const int64_t row0 = p * fp8_panel_rows;
    const kblock_scales kb = kblock_scales_for(w, row0);  // block_rows % 64 == 0 (fast_supports)
    const uint8_t* panel = base + p * panel_bytes;
    // one activation row: this panel and the next together when they share a scale row block
    if (x.num_rows == 1 && p < last && (row0 + fp8_panel_rows) / w.block_rows == row0 / w.block_rows) {
      __m512 sums[max_pass_rows][4];
      panel_dot<1, 2>(panel, panel_bytes, a, k, kb, end, sums);
      store_rows(sums, 2, row0, 0, r0, nr, out, ldo);
      ++p;
      continue;
    }
    for (int64_t m0 = 0; m0 < x.num_rows; m0 += max_pass_rows) {
      const int64_t nt = std::min(max_pass_rows, x.num_rows - m0);
      const char* prefetch_to = m0 == 0 ? end : nullptr;  // later passes read from cache
      __m512 sums[max_pass_rows][4];
      switch (nt) {
        case 1: panel_dot<1, 1>(panel, panel_bytes, a + m0, k, kb, prefetch_to, sums); break;
        case 2: panel_dot<2, 1>(panel, panel_bytes, a + m0, k, kb, prefetch_to, sums); break;
        case 3: panel_dot<3, 1>(panel, panel_bytes, a + m0, k, kb, prefetch_to, sums); break;
        default: panel_dot<4, 1>(panel, panel_bytes, a + m0, k, kb, prefetch_to, sums); break;
      }
      for (int64_t m = 0; m < nt; ++m)
        store_rows(sums + m, 1, row0, m0 + m, r0, nr, out, ldo);
    }
  }
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
