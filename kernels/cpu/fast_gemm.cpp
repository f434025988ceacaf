// kernels/cpu/fast_gemm.cpp
// The blocked GEMM for many activation rows (prefill, batched decode, busy experts).
// 64 weight rows are packed into a panel laid out [kp][64][2]: for each pair of input columns
// (2kp, 2kp+1), 64 output rows' pairs side by side, so one zmm holds 16 rows' pairs. The
// 6x64 register tile then takes, per kp, 4 panel loads and 6 broadcast activation pairs into 24
// vdpbf16ps accumulators; from fma_min_rows rows on, fp32 FMA tiles (fast_gemm_fma.cpp) take
// the panel instead, with the same sums. FP8 weights are expanded to bf16 while packing (one
// pass over the weight) exactly as the GEMV over panels expands them, 2^120 too small with the
// factors on the activations and the block scales (fast_linear.hpp), and the tiles add each
// scale block's sums as the GEMV does, so both kernels give a row the same bits; a panel never
// straddles a scale row block.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <optional>
#include <stdexcept>

#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {
namespace {

[[nodiscard]] inline __mmask32 tail_mask32(int64_t n) noexcept {
  return n <= 0 ? __mmask32{0} : n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
}

// Stores 16 rows' worth of 32-column chunks, v[j] = row j's columns as bf16 pairs, into the
// panel at column pair kp0 for rows g * 16 ..: a 16x16 transpose of 32-bit pairs.
inline void store_transposed(__m512i v[16], uint16_t* panel, int64_t kp0, int64_t g) noexcept {
  transpose16x16_epi32(v);  // v[i]: column pair kp0 + i of the 16 rows
  for (int64_t i = 0; i < 16; ++i)
    _mm512_store_si512(panel + ((kp0 + i) * panel_rows + g * 16) * 2, v[i]);
}

// panel[(kp * 64 + j) * 2 + {0, 1}] = W[r0 + j][2kp + {0, 1}] for j < n (rows past n are left
// as they are: their lanes are never stored), kp < panel_pairs(k). Groups of 16 rows one after
// another, each read as 16 sequential streams with software prefetch (64 streams at once would
// defeat the hardware prefetcher: the weights come from DRAM). BF16: 32 columns a step.
constexpr int64_t pack_prefetch_bytes = 1024;

void pack_panel_bf16(const linear_weight& w, int64_t r0, int64_t n, uint16_t* panel) noexcept {
  const int64_t k = w.in_features;
  const auto* data = static_cast<const uint16_t*>(w.data);
  for (int64_t g = 0; g * 16 < n; ++g) {
    const int64_t rows = std::min<int64_t>(16, n - g * 16);
    const uint16_t* base = data + (r0 + g * 16) * k;
    for (int64_t kp0 = 0; 2 * kp0 < k; kp0 += 16) {
      const __mmask32 mask = tail_mask32(k - 2 * kp0);
      __m512i v[16];
      for (int64_t j = 0; j < 16; ++j) {
        if (j < rows) {
          const uint16_t* p = base + j * k + 2 * kp0;
          _mm_prefetch(reinterpret_cast<const char*>(p) + pack_prefetch_bytes, _MM_HINT_T0);
          v[j] = _mm512_maskz_loadu_epi16(mask, p);
        } else {
          v[j] = _mm512_setzero_si512();
        }
      }
      store_transposed(v, panel, kp0, g);
    }
  }
}

// FP8: 64 columns a step, expanded as the GEMV over panels expands them (2^-120 too small,
// fp8x64_to_bf16_scaled) and put in natural order.
void pack_panel_fp8(const linear_weight& w, int64_t r0, int64_t n, uint16_t* panel) noexcept {
  const int64_t k = w.in_features;
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g * 16 < n; ++g) {
    const int64_t rows = std::min<int64_t>(16, n - g * 16);
    const uint8_t* base = data + (r0 + g * 16) * k;
    for (int64_t kp0 = 0; 2 * kp0 < k; kp0 += 32) {
      const int64_t left = k - 2 * kp0;
      const __mmask64 mask = left >= 64 ? ~__mmask64{0} : (uint64_t{1} << left) - 1;
      __m512i lo[16], hi[16];
      for (int64_t j = 0; j < 16; ++j) {
        __m512i u0 = _mm512_setzero_si512(), u1 = u0;
        if (j < rows) {
          const uint8_t* p = base + j * k + 2 * kp0;
          _mm_prefetch(reinterpret_cast<const char*>(p) + pack_prefetch_bytes, _MM_HINT_T0);
          fp8x64_to_bf16_scaled(_mm512_maskz_loadu_epi8(mask, p), u0, u1);
        }
        lo[j] = unpack_to_natural_lo(u0, u1);
        hi[j] = unpack_to_natural_hi(u0, u1);
      }
      store_transposed(lo, panel, kp0, g);
      store_transposed(hi, panel, kp0 + 16, g);
    }
  }
}

// The same from weight_layout::fp8_panels: a stored panel's 128 bytes per column pair expand in
// order into this panel's pairs of rows 0-15, 16-31, 32-47, 48-63 (no transpose). A panel that
// does not start a stored one (tasks cut elsewhere) is gathered element by element.
void pack_panel_fp8_panels(const linear_weight& w, int64_t r0, int64_t n, uint16_t* panel) noexcept {
  const int64_t k = w.in_features;
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (r0 % fp8_panel_rows != 0) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < k; ++i)
        panel[((i / 2) * panel_rows + j) * 2 + i % 2] =
          fp8_to_bf16_scaled(data[fp8_panel_offset(r0 + j, i, k)]);
    return;
  }
  const uint8_t* src = data + r0 * k;  // the stored panel: k / 2 pairs of 128 bytes
  for (int64_t kp = 0; kp < k / 2; ++kp) {
    _mm_prefetch(reinterpret_cast<const char*>(src + kp * 128) + pack_prefetch_bytes, _MM_HINT_T0);
    __m512i u[4];
    fp8x64_to_bf16_scaled(_mm512_loadu_si512(src + kp * 128), u[0], u[1]);
    fp8x64_to_bf16_scaled(_mm512_loadu_si512(src + kp * 128 + 64), u[2], u[3]);
    for (int q = 0; q < 4; ++q)
      _mm512_store_si512(panel + kp * panel_rows * 2 + 32 * q, u[q]);
  }
}

// Column pairs a panel holds (both packers write whole steps of 32 pairs at most).
[[nodiscard]] constexpr int64_t panel_pairs(int64_t k) noexcept { return round_up((k + 1) / 2, 32); }

// Bytes ahead that a tile over a packed panel read from memory (not one just packed into cache)
// prefetches: the panel is one contiguous stream, and few activation rows (a decode step's
// GEMV-sized calls) leave too little compute per byte for the demand loads alone to keep the
// memory busy.
constexpr int64_t tile_prefetch_bytes = 8192;

// out[m][j] = sum_kp dot(a[m] pair kp, panel[kp][j]) for m < MR, j < n: each output one fp32 lane
// summing the column pairs in order, whatever MR (so a row's result does not depend on the other
// rows of the call, nor on GEMV against GEMM: fast_gemv_panels.cpp sums in the same order);
// BF16: stored at the end; FP8: block by block of kb.pairs pairs, each block's sums from zero
// added into out by fp8_block_sum.
template <int MR, bool Prefetch>
void tile_kernel(const uint16_t* const* a, const uint16_t* panel, int64_t num_kp, float* out, int64_t ldo,
                 int64_t n, kblock_scales kb) noexcept {
  if (num_kp == 0)  // no inputs: zeros (and no scale to read)
    kb = {};
  const int32_t* ap[MR];
  for (int m = 0; m < MR; ++m)
    ap[m] = reinterpret_cast<const int32_t*>(a[m]);
  __mmask16 mask[4];
  for (int j = 0; j < 4; ++j)
    mask[j] = tail_mask16(n - 16 * j);
  const int64_t step = kb.scales ? kb.pairs : std::max<int64_t>(num_kp, 1);
  for (int64_t b0 = 0; b0 < std::max<int64_t>(num_kp, 1); b0 += step) {
    __m512 acc[MR][4];
    for (auto& row : acc)
      for (auto& v : row)
        v = _mm512_setzero_ps();
    for (int64_t kp = b0; kp < std::min(num_kp, b0 + step); ++kp) {
      const uint16_t* b = panel + kp * panel_rows * 2;
      if constexpr (Prefetch)
        for (int i = 0; i < 4; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(b + 32 * i) + tile_prefetch_bytes, _MM_HINT_T0);
      const __m512bh b0v = (__m512bh)_mm512_load_si512(b);
      const __m512bh b1v = (__m512bh)_mm512_load_si512(b + 32);
      const __m512bh b2v = (__m512bh)_mm512_load_si512(b + 64);
      const __m512bh b3v = (__m512bh)_mm512_load_si512(b + 96);
      for (int m = 0; m < MR; ++m) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(ap[m][kp]);
        acc[m][0] = _mm512_dpbf16_ps(acc[m][0], av, b0v);
        acc[m][1] = _mm512_dpbf16_ps(acc[m][1], av, b1v);
        acc[m][2] = _mm512_dpbf16_ps(acc[m][2], av, b2v);
        acc[m][3] = _mm512_dpbf16_ps(acc[m][3], av, b3v);
      }
    }
    for (int j = 0; j < 4; ++j) {
      if (mask[j] == 0)
        break;
      for (int m = 0; m < MR; ++m) {
        float* o = out + m * ldo + 16 * j;
        if (kb.scales == nullptr)
          _mm512_mask_storeu_ps(o, mask[j], acc[m][j]);
        else
          _mm512_mask_storeu_ps(o, mask[j],
                                fp8_block_sum(acc[m][j], kb.scales[b0 / step],
                                              b0 == 0 ? _mm512_setzero_ps()
                                                      : _mm512_maskz_loadu_ps(mask[j], o)));
      }
    }
  }
}

// One activation row against two packed panels read from memory at once (b0, then b1 for
// the next 64 weight rows): the same sums as tile_kernel<1> on each, lane by lane, with twice
// the independent chains and two streams in flight (the 129280-row lm_head at batch 1, paired
// with a plain read of the step's bytes: 76-79 % -> 81-82 % of that read's rate).
void tile_kernel_1x2(const uint16_t* a, const uint16_t* b0, const uint16_t* b1, int64_t num_kp, float* out,
                     int64_t n1) noexcept {
  __m512 acc[2][4];
  for (auto& panel : acc)
    for (auto& v : panel)
      v = _mm512_setzero_ps();
  const auto* ap = reinterpret_cast<const int32_t*>(a);
  for (int64_t kp = 0; kp < num_kp; ++kp) {
    const __m512bh av = (__m512bh)_mm512_set1_epi32(ap[kp]);
    for (int p = 0; p < 2; ++p) {
      const uint16_t* b = (p == 0 ? b0 : b1) + kp * panel_rows * 2;
      for (int i = 0; i < 4; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(b + 32 * i) + tile_prefetch_bytes, _MM_HINT_T0);
      for (int j = 0; j < 4; ++j)
        acc[p][j] = _mm512_dpbf16_ps(acc[p][j], av, (__m512bh)_mm512_load_si512(b + 32 * j));
    }
  }
  for (int j = 0; j < 4; ++j)
    _mm512_storeu_ps(out + 16 * j, acc[0][j]);
  for (int j = 0; j < 4; ++j) {
    const int64_t left = n1 - 16 * j;
    if (left <= 0)
      break;
    const __mmask16 mask = tail_mask16(left);
    _mm512_mask_storeu_ps(out + 64 + 16 * j, mask, acc[1][j]);
  }
}

template <bool Prefetch>
void tile_kernel_any(int64_t mr, const uint16_t* const* a, const uint16_t* panel, int64_t num_kp, float* out,
                     int64_t ldo, int64_t n, kblock_scales kb) noexcept {
  switch (mr) {
    case 1: tile_kernel<1, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
    case 2: tile_kernel<2, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
    case 3: tile_kernel<3, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
    case 4: tile_kernel<4, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
    case 5: tile_kernel<5, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
    default: tile_kernel<6, Prefetch>(a, panel, num_kp, out, ldo, n, kb); break;
  }
}

// Panel of rows [p0, p0 + n) ready in w.gemm_panels: p0 starts a panel (tasks split the rows in
// whole panels; the last one may be short and is packed short).
[[nodiscard]] const uint16_t* packed_panel(const linear_weight& w, int64_t p0) noexcept {
  if (w.gemm_panels == nullptr || p0 % panel_rows != 0)
    return nullptr;
  return w.gemm_panels + (p0 / panel_rows) * panel_size(w.in_features);
}

// The bytes the panel of rows [p0, min(p0 + 64, end)) is made from: its packed copy, or the
// weight's rows (row-major and FP8 panels alike hold them contiguously); empty past `end`.
[[nodiscard]] std::span<const char> panel_source_bytes(const linear_weight& w, int64_t p0,
                                                       int64_t end) noexcept {
  if (p0 >= end)
    return {};
  if (const uint16_t* ready = packed_panel(w, p0))
    return {reinterpret_cast<const char*>(ready), static_cast<size_t>(panel_size(w.in_features) * 2)};
  const int64_t row_bytes = w.in_features * dtype_size(w.type);
  return {static_cast<const char*>(w.data) + p0 * row_bytes,
          static_cast<size_t>(std::min(panel_rows, end - p0) * row_bytes)};
}

template <dtype T>
void gemm_rows_typed(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                     int64_t ldo, thread_scratch& s) {
  const int64_t num_kp = (w.in_features + 1) / 2;
  auto* panel = s.panel.get<uint16_t>(panel_pairs(w.in_features) * panel_rows * 2);
  const int64_t block_rows = T == dtype::f8_e4m3 ? w.block_rows : (int64_t{1} << 62);
  const bool fma = x.num_rows >= fma_min_rows;
  // the activations, rounded once for the call; FP8's block sums under the FMA tiles' MXCSR
  const uint16_t* const* a = fma ? nullptr : bf16_rows(x, w, s);
  const float* const* a32 = fma ? fma_rows(x, w, s) : nullptr;
  std::optional<flush_subnormals> flush;
  if (T == dtype::f8_e4m3)
    flush.emplace();
  for (int64_t p0 = r0; p0 < r0 + nr;) {
    // a panel within one scale row block
    const int64_t n = std::min({panel_rows, r0 + nr - p0, (p0 / block_rows + 1) * block_rows - p0});
    const kblock_scales kb = kblock_scales_for(w, p0);
    const uint16_t* b = panel;
    bool from_memory = false;
    if constexpr (T == dtype::bf16) {
      if (const uint16_t* ready = packed_panel(w, p0)) {
        b = ready;
        from_memory = true;
      } else {
        pack_panel_bf16(w, p0, n, panel);
      }
    } else if (w.layout == weight_layout::fp8_panels) {
      pack_panel_fp8_panels(w, p0, n, panel);
    } else {
      pack_panel_fp8(w, p0, n, panel);
    }
    if constexpr (T == dtype::bf16) {  // batch 1 over packed panels: two at a time
      const int64_t p1 = p0 + panel_rows;
      const uint16_t* next = p1 < r0 + nr ? packed_panel(w, p1) : nullptr;
      if (x.num_rows == 1 && from_memory && n == panel_rows && next != nullptr) {
        const int64_t n1 = std::min(panel_rows, r0 + nr - p1);
        tile_kernel_1x2(a[0], b, next, num_kp, out + (p0 - r0), n1);
        p0 = p1 + n1;
        continue;
      }
    }
    if (fma) {
      fma_panel_tiles(a32, x.num_rows, b, num_kp, out + (p0 - r0), ldo, n, kb,
                      panel_source_bytes(w, p0 + n, r0 + nr), s);
      p0 += n;
      continue;
    }
    for_each_row_tile(x.num_rows, [&](int64_t i, int64_t m0, int64_t mr) {
      // the first tile streams the panel from memory; later ones find it in cache
      if (from_memory && i == 0)
        tile_kernel_any<true>(mr, a + m0, b, num_kp, out + m0 * ldo + (p0 - r0), ldo, n, kb);
      else
        tile_kernel_any<false>(mr, a + m0, b, num_kp, out + m0 * ldo + (p0 - r0), ldo, n, kb);
    });
    p0 += n;
  }
}

}  // namespace

int64_t panel_size(int64_t k) noexcept { return panel_pairs(k) * panel_rows * 2; }

int64_t gemm_panels_bytes(const linear_weight& w) noexcept {
  return (w.out_features + panel_rows - 1) / panel_rows * panel_size(w.in_features) * 2;
}

void pack_gemm_panels_into(const linear_weight& w, uint16_t* dst) {
  if (w.type != dtype::bf16)
    throw std::invalid_argument("pack_gemm_panels: only BF16 weights are packed ahead");
  const int64_t panels = (w.out_features + panel_rows - 1) / panel_rows, size = panel_size(w.in_features);
  std::fill_n(dst, panels * size, uint16_t{0});  // a short last panel's missing rows
  for (int64_t p = 0; p < panels; ++p)
    pack_panel_bf16(w, p * panel_rows, std::min(panel_rows, w.out_features - p * panel_rows), dst + p * size);
}

void gemm_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out, int64_t ldo,
               thread_scratch& s) {
  if (w.type == dtype::bf16)
    gemm_rows_typed<dtype::bf16>(x, w, r0, nr, out, ldo, s);
  else
    gemm_rows_typed<dtype::f8_e4m3>(x, w, r0, nr, out, ldo, s);
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
