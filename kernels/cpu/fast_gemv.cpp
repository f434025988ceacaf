// kernels/cpu/fast_gemv.cpp
// Dot-product kernels over stored BF16 / FP8 weight rows, for few activation rows (decode): each
// weight row is loaded once and dotted with every activation row, so the weight streams from
// memory exactly once per call at its stored width.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_linear.hpp"

namespace moe::fast {
namespace {

constexpr int64_t max_pass_rows = 4;        // activation rows per bf16 register tile
// Software prefetch some rows ahead (`ahead` bytes on from each row: the same columns of the
// rows `lead` later, gemv_rows_typed): a few short row streams per thread do not keep enough
// loads in flight on their own (measured: BF16 GEMV 22 -> 53 GB/s on 2 threads).

[[nodiscard]] inline __mmask32 tail_mask32(int64_t n) noexcept {
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
}
[[nodiscard]] inline __mmask64 tail_mask64(int64_t n) noexcept {
  return n >= 64 ? ~__mmask64{0} : static_cast<__mmask64>((uint64_t{1} << n) - 1);
}

// Lane r * NT + t = horizontal sum of acc[r][t], one shuffle-add tree for all R x NT (<= 16).
template <int R, int NT>
[[nodiscard]] inline __m512 lane_sums(const __m512 acc[R][NT]) noexcept {
  static_assert(R * NT <= 16);
  __m512 v[16];
  for (int i = 0; i < 16; ++i)
    v[i] = i < R * NT ? acc[i / NT][i % NT] : _mm512_setzero_ps();
  return reduce16(v);
}

// out[r][t] = dot(W row r, a[t]) for R BF16 weight rows and NT activation rows (bf16, zero-padded
// to 32). acc[r][t] holds 16 partial sums (vdpbf16ps adds two products per lane per step); one
// horizontal sum per (r, t) at the end. R x NT <= 16 accumulators; each weight vector is loaded
// once and used NT times.
template <int R, int NT>
void dot_group_bf16(const void* const rows[], const uint16_t* const* a, int64_t k, int64_t ahead,
                    __m512& out) noexcept {
  __m512 acc[R][NT];
  for (auto& row : acc)
    for (auto& v : row)
      v = _mm512_setzero_ps();
  auto step = [&](int64_t i, __mmask32 mask, bool full) {
    __m512i w[R];
    for (int r = 0; r < R; ++r) {
      const auto* p = static_cast<const uint16_t*>(rows[r]) + i;
      w[r] = full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(mask, p);
    }
    for (int t = 0; t < NT; ++t) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a[t] + i);
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], av, (__m512bh)w[r]);
    }
  };
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    for (int r = 0; r < R; ++r)
      _mm_prefetch(static_cast<const char*>(rows[r]) + 2 * i + ahead, _MM_HINT_T0);
    step(i, 0, true);
  }
  if (i < k)
    step(i, tail_mask32(k - i), false);
  out = lane_sums<R, NT>(acc);
}

// FP8 GEMV: weights 2^120 too small (fp8x64_to_bf16_scaled: bit permutation, cheap enough that
// batch 1 stays bandwidth-bound), activations 2^56 too large, sums 2^64 too small
// (fp8_gemv_act_factor / fp8_gemv_out_factor, fast_linear.hpp).

// The same for FP8 weight rows, 64 columns a step, in unpack order, so the activations come
// pre-permuted to match (fp8_rows below).
template <int R, int NT>
void dot_group_fp8(const void* const rows[], const uint16_t* const* a, int64_t k, int64_t ahead,
                   __m512& out) noexcept {
  __m512 acc[R][NT];
  for (auto& row : acc)
    for (auto& v : row)
      v = _mm512_setzero_ps();
  auto step = [&](int64_t i, __mmask64 mask, bool full) {
    __m512i w0[R], w1[R];
    for (int r = 0; r < R; ++r) {
      const auto* p = static_cast<const uint8_t*>(rows[r]) + i;
      fp8x64_to_bf16_scaled(full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(mask, p), w0[r], w1[r]);
    }
    for (int t = 0; t < NT; ++t) {
      const __m512bh a0 = (__m512bh)_mm512_loadu_si512(a[t] + i);
      const __m512bh a1 = (__m512bh)_mm512_loadu_si512(a[t] + i + 32);
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[r][t], a0, (__m512bh)w0[r]), a1, (__m512bh)w1[r]);
    }
  };
  int64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    for (int r = 0; r < R; ++r)
      _mm_prefetch(static_cast<const char*>(rows[r]) + i + ahead, _MM_HINT_T0);
    step(i, 0, true);
  }
  if (i < k)
    step(i, tail_mask64(k - i), false);
  out = lane_sums<R, NT>(acc);
}

// FP8 batch 1: one row after another (the rows of a group are adjacent, so this reads one
// sequential stream), 256 columns a step into 8 accumulators (independent dpbf16 chains).
// Measured on 2 threads, [2816, 1024] and [129280, 1024]: 30-36 -> 41-50 GB/s. Full steps load
// without a mask (the per-chunk mask arithmetic cost issue slots) and the accumulators meet in a
// tree, not a serial chain of 7 adds.
template <int R>
void dot_rows_fp8_b1(const void* const rows[], const uint16_t* a, int64_t k, int64_t ahead,
                     __m512& out) noexcept {
  __m512 sums[R][1];
  for (int r = 0; r < R; ++r) {
    const auto* p = static_cast<const uint8_t*>(rows[r]);
    __m512 acc[8];
    for (auto& v : acc)
      v = _mm512_setzero_ps();
    // Columns i .. i + 64 (the weight bytes `codes`) into accumulators 2q, 2q + 1.
    auto step = [&](int64_t i, int q, __m512i codes) {
      __m512i w0, w1;
      fp8x64_to_bf16_scaled(codes, w0, w1);
      acc[2 * q] = _mm512_dpbf16_ps(acc[2 * q], (__m512bh)_mm512_loadu_si512(a + i), (__m512bh)w0);
      acc[2 * q + 1] = _mm512_dpbf16_ps(acc[2 * q + 1], (__m512bh)_mm512_loadu_si512(a + i + 32), (__m512bh)w1);
    };
    int64_t i = 0;
    for (; i + 256 <= k; i += 256) {
      for (int q = 0; q < 4; ++q)
        _mm_prefetch(reinterpret_cast<const char*>(p) + i + 64 * q + ahead, _MM_HINT_T0);
      for (int q = 0; q < 4; ++q)
        step(i + 64 * q, q, _mm512_loadu_si512(p + i + 64 * q));
    }
    // The tail's chunks with constant accumulator indices (a runtime index would put acc[] on
    // the stack for the whole loop).
    for (int q = 0; q < 4; ++q)
      if (i + 64 * q < k) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + i + 64 * q + ahead, _MM_HINT_T0);
        step(i + 64 * q, q, _mm512_maskz_loadu_epi8(tail_mask64(k - i - 64 * q), p + i + 64 * q));
      }
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm512_add_ps(acc[j], acc[j + 4]);
    sums[r][0] = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
  }
  out = lane_sums<R, 1>(sums);
}

// Register tiles: 8 weight rows for a single activation row (more streams in flight, and one
// horizontal-sum tree per 8 rows: FP8 [256, 1024] / [1024, 256] with the weights in L2, one
// thread, 46 / 42 -> 55 / 60 GB/s against 4 rows), else 4 rows x up to 4 activation rows; more
// activation rows take further passes over the same 4 rows, from L1.
[[nodiscard]] constexpr int rows_per_group(int64_t num_rows) noexcept {
  return num_rows == 1 ? 8 : 4;
}

template <dtype T, int R, int NT>
void dot_group(const void* const rows[], const uint16_t* const* a, int64_t k, int64_t ahead,
               __m512& out) noexcept {
  if constexpr (T == dtype::bf16)
    dot_group_bf16<R, NT>(rows, a, k, ahead, out);
  else if (NT == 1 && k >= 512)      // measured: shorter rows are faster in row groups
    dot_rows_fp8_b1<R>(rows, *a, k, ahead, out);
  else
    dot_group_fp8<R, NT>(rows, a, k, ahead, out);
}

template <dtype T>
void dot_group_any(int group, int64_t nt, const void* const rows[], const uint16_t* const* a,
                   int64_t k, int64_t ahead, __m512& out) noexcept {
  switch (nt) {
    case 1:
      if (group == 8)
        dot_group<T, 8, 1>(rows, a, k, ahead, out);
      else
        dot_group<T, 4, 1>(rows, a, k, ahead, out);
      break;
    case 2: dot_group<T, 4, 2>(rows, a, k, ahead, out); break;
    case 3: dot_group<T, 4, 3>(rows, a, k, ahead, out); break;
    default: dot_group<T, 4, 4>(rows, a, k, ahead, out); break;
  }
}

// FP8 GEMV activations: x times the block scales of weight row block `row_block` and 2^56,
// rounded to bf16, zero-padded to round_up(k, 64) and permuted per 64 columns into unpack order.
const uint16_t* const* fp8_rows(const act_rows& x, const linear_weight& w, int64_t row_block,
                                thread_scratch& s) {
  const int64_t lda = round_up(x.k, 64);
  auto* buf = s.act.get<uint16_t>(x.num_rows * lda);
  auto** ptrs = s.act_ptrs.get<const uint16_t*>(x.num_rows);
  const float* scales = w.scale_inv + row_block * ((w.in_features + w.block_cols - 1) / w.block_cols);
  for (int64_t m = 0; m < x.num_rows; ++m) {
    uint16_t* row = buf + m * lda;
    f32_row_to_bf16(x.f32[m], x.k, row, scales, w.block_cols, fp8_gemv_act_factor);
    if (lda > round_up(x.k, 32))
      std::fill(row + round_up(x.k, 32), row + lda, uint16_t{0});
    for (int64_t i = 0; i < lda; i += 64) {
      const __m512i n0 = _mm512_load_si512(row + i), n1 = _mm512_load_si512(row + i + 32);
      _mm512_store_si512(row + i, natural_to_unpack_0(n0, n1));
      _mm512_store_si512(row + i + 32, natural_to_unpack_1(n0, n1));
    }
    ptrs[m] = row;
  }
  return ptrs;
}

template <dtype T>
void gemv_rows_typed(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
                     int64_t ldo, thread_scratch& s) {
  const int64_t k = x.k, row_bytes = k * dtype_size(T);
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t block_rows = T == dtype::f8_e4m3 ? w.block_rows : (int64_t{1} << 62);
  const int group = rows_per_group(x.num_rows);
  int64_t row_block = -1;
  const uint16_t* const* a = nullptr;
  // The loop prefetches `lead` rows ahead (a group, and at least 8 KiB so short rows still
  // cover the memory latency; more was measured no faster); start the first `lead` now.
  const int64_t lead = std::max<int64_t>(group, (8192 + row_bytes - 1) / row_bytes);
  const char* first = reinterpret_cast<const char*>(base + r0 * row_bytes);
  for (int64_t off = 0; off < std::min<int64_t>(nr, lead) * row_bytes; off += 64)
    _mm_prefetch(first + off, _MM_HINT_T0);
  for (int64_t g = r0; g < r0 + nr;) {
    // A group never straddles a scale row block: its rows share the scaled activations.
    const int64_t n = std::min({int64_t{group}, r0 + nr - g, (g / block_rows + 1) * block_rows - g});
    if (g / block_rows != row_block) {
      row_block = g / block_rows;
      a = T == dtype::f8_e4m3 ? fp8_rows(x, w, row_block, s) : bf16_rows(x, w, 0, s);
    }
    const void* rows[8];
    for (int r = 0; r < 8; ++r)
      rows[r] = base + (g + std::min<int64_t>(r, n - 1)) * row_bytes;
    // Prefetch `lead` rows ahead, but not past this call's rows (another task's, or none).
    const int64_t ahead = std::min(lead, r0 + nr - g - n) * row_bytes;
    for (int64_t m0 = 0; m0 < x.num_rows; m0 += max_pass_rows) {
      const int64_t nt = std::min(max_pass_rows, x.num_rows - m0);
      __m512 sums;                          // lane r * nt + t: row g + r, activation row m0 + t
      dot_group_any<T>(group, nt, rows, a + m0, k, m0 == 0 ? ahead : 0, sums);
      if constexpr (T == dtype::f8_e4m3)
        sums = _mm512_mul_ps(sums, _mm512_set1_ps(fp8_gemv_out_factor));
      if (nt == 1) {                        // the common decode case: n adjacent outputs
        _mm512_mask_storeu_ps(out + m0 * ldo + (g - r0), static_cast<__mmask16>((1u << n) - 1), sums);
      } else {
        alignas(64) float res[16];
        _mm512_store_ps(res, sums);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t r = 0; r < n; ++r)
            out[(m0 + t) * ldo + (g - r0 + r)] = res[r * nt + t];
      }
    }
    g += n;
  }
}

}  // namespace

void gemv_rows(const act_rows& x, const linear_weight& w, int64_t r0, int64_t nr, float* out,
               int64_t ldo, thread_scratch& s) {
  if (w.layout == weight_layout::fp8_panels)
    gemv_rows_fp8_panels(x, w, r0, nr, out, ldo, s);
  else if (w.type == dtype::bf16)
    gemv_rows_typed<dtype::bf16>(x, w, r0, nr, out, ldo, s);
  else
    gemv_rows_typed<dtype::f8_e4m3>(x, w, r0, nr, out, ldo, s);
}

}  // namespace moe::fast
