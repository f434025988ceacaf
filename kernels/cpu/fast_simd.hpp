// kernels/cpu/fast_simd.hpp
// AVX-512 building blocks shared by the fast CPU kernels: e4m3 -> bf16 expansion in registers
// (exact by table, or scaled by bit permutation),
// fp32 -> bf16 rows, a 16x16 32-bit transpose, a horizontal-sum tree, a vector exp, and an
// aligned scratch buffer.
#pragma once

// GCC 12 flags the intrinsics' internal `_mm512_undefined_*` self-initialisation once inlined
// (GCC bug 105593); silence it for the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/dtype.hpp"

// The fast path's code (its headers' inline functions and its .cpp files) is defined between
// these, for its AVX-512 target, instead of building whole files with -mavx512* flags: a file
// built with those flags also emits the std templates it instantiates (vector growth, sorting)
// with AVX-512 instructions, and the linker may keep that copy for every caller, so code that
// runs on any CPU (a test's registration, a checkpoint load) died with SIGILL on an AVX2-only
// CPU. Templates defined outside a region (the standard library's) stay built for any CPU. Call
// the code in a region only where cpu_fast_path_supported().
#if defined(__clang__)
#  define MOE_FAST_TARGET_BEGIN \
    _Pragma(                    \
      "clang attribute push(__attribute__((target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,gfni\"))), apply_to = function)")
#  define MOE_FAST_TARGET_END _Pragma("clang attribute pop")
#elif defined(__GNUC__)
#  define MOE_FAST_TARGET_BEGIN \
    _Pragma("GCC push_options") \
      _Pragma("GCC target(\"avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,gfni\")")
#  define MOE_FAST_TARGET_END _Pragma("GCC pop_options")
#else
#  define MOE_FAST_TARGET_BEGIN
#  define MOE_FAST_TARGET_END
#endif

MOE_FAST_TARGET_BEGIN

namespace moe::fast {

/// Rounds `n` up to a multiple of `m`.
[[nodiscard]] constexpr int64_t round_up(int64_t n, int64_t m) noexcept { return (n + m - 1) / m * m; }

/// The first min(max(n, 0), 16) lanes of 16: a row's tail, or none past its end.
[[nodiscard]] inline __mmask16 tail_mask16(int64_t n) noexcept {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

/// The power of two by which fp8x64_to_bf16_scaled's outputs fall short of the e4m3 values.
inline constexpr int fp8_scaled_shift = 120;

/// 64 e4m3 bytes -> 64 bf16 equal to the e4m3 values x 2^-120, in the same unpack order as
/// fp8x64_to_bf16: the e4m3 bits copied into place (sign -> bit 15, the 4 exponent bits -> the
/// low 4 of bf16's exponent field, the 3 mantissa bits -> the top of bf16's mantissa), which is
/// two GF(2) affine bit permutations (GFNI, one for the high and one for the low byte) and the
/// two unpacks: 4 single-cycle ops against the table path's 2 three-source permutes, a ternary
/// op and 2 unpacks, so batch-1 FP8 GEMV stays bandwidth-bound. Exact for zero and all normal
/// codes; the subnormal codes (|x| < 2^-6) land on bf16 subnormals, which vdpbf16ps reads as zero,
/// and the NaN code on a finite value. For dot products with the 2^120 folded into the other side.
inline void fp8x64_to_bf16_scaled(__m512i codes, __m512i& out0, __m512i& out1) noexcept {
  // Row 7 - i of each matrix (byte 7 - i of the qword) selects the input bit of output bit i.
  // High byte: s 0 0 0 0 e3 e2 e1 <- bits 7, 6, 5, 4; low byte: e0 m2 m1 m0 0 0 0 0 <- bits 3..0.
  const __m512i hi = _mm512_gf2p8affine_epi64_epi8(codes, _mm512_set1_epi64(0x1020400000000080ll), 0);
  const __m512i lo = _mm512_gf2p8affine_epi64_epi8(codes, _mm512_set1_epi64(0x0000000001020408ll), 0);
  out0 = _mm512_unpacklo_epi8(lo, hi);
  out1 = _mm512_unpackhi_epi8(lo, hi);
}

/// fp8x64_to_bf16_scaled for one code: its bits copied into bf16's places.
[[nodiscard]] constexpr uint16_t fp8_to_bf16_scaled(uint8_t code) noexcept {
  return static_cast<uint16_t>((code & 0x80) << 8 | (code & 0x7f) << 4);
}

/// Unpack order (above) <-> natural order of 64 bf16 held in two vectors, by 64-bit quarters.
[[nodiscard]] inline __m512i unpack_to_natural_lo(__m512i u0, __m512i u1) noexcept {
  return _mm512_permutex2var_epi64(u0, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), u1);
}
[[nodiscard]] inline __m512i unpack_to_natural_hi(__m512i u0, __m512i u1) noexcept {
  return _mm512_permutex2var_epi64(u0, _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4), u1);
}
[[nodiscard]] inline __m512i natural_to_unpack_0(__m512i n0, __m512i n1) noexcept {
  return _mm512_permutex2var_epi64(n0, _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), n1);
}
[[nodiscard]] inline __m512i natural_to_unpack_1(__m512i n0, __m512i n1) noexcept {
  return _mm512_permutex2var_epi64(n0, _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2), n1);
}

/// 16 fp32 -> 16 bf16, round to nearest even.
[[nodiscard]] inline __m256i f32x16_to_bf16(__m512 v) noexcept { return (__m256i)_mm512_cvtneps_pbh(v); }

/// put(i, v) for i = 0, 16, .. < k with v = src[i .. i + 16) * factor (zeros past k); `factor` is
/// a power of two (the FP8 kernels' 2^56), so the product is exact.
template <class Put>
inline void for_each_scaled16(const float* src, int64_t k, float factor, Put put) noexcept {
  const __m512 sv = _mm512_set1_ps(factor);
  for (int64_t i = 0; i < k; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask16(k - i), src + i);
    put(i, factor != 1.0f ? _mm512_mul_ps(v, sv) : v);
  }
}

/// dst[0..k) = bf16(src[i] * factor) (for_each_scaled16), dst[k..round_up(k, 32)) = 0.
inline void f32_row_to_bf16(const float* src, int64_t k, uint16_t* dst, float factor = 1.0f) noexcept {
  for_each_scaled16(src, k, factor, [&](int64_t i, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f32x16_to_bf16(v));
  });
  for (int64_t i = round_up(k, 16); i < round_up(k, 32); ++i)
    dst[i] = 0;
}

/// The values f32_row_to_bf16 rounds to, widened back to fp32 with each column pair swapped (odd
/// column first), as the GEMM's FMA tiles read them (fast_gemm_fma.cpp): dst[0..k) and zeros up
/// to round_up(k, 16).
inline void f32_row_to_fma_pairs(const float* src, int64_t k, float* dst, float factor = 1.0f) noexcept {
  for_each_scaled16(src, k, factor, [&](int64_t i, __m512 v) {
    const __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(f32x16_to_bf16(v)), 16);
    _mm512_storeu_ps(dst + i, _mm512_permute_ps(_mm512_castsi512_ps(wide), 0xb1));
  });
}

/// Transposes a 16x16 matrix of 32-bit lanes held in r[0..16) (row i -> r[i]).
inline void transpose16x16_epi32(__m512i r[16]) noexcept {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4g + j] holds, in each 128-bit lane L, element j of rows 4g..4g+3 at columns 4L + j.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      // lanes 0,2 of r[i] | 0,2 of r[i+4]
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);  // lanes 1,3
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

/// Lane i of the result = the horizontal sum of v[i], for 16 vectors: a shuffle-add tree (45
/// ops, against ~8 per vector summed alone).
[[nodiscard]] inline __m512 reduce16(const __m512 v[16]) noexcept {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int j = 0; j < 4; ++j) {  // per 128-bit lane: [a, b, c, d] partial sums
    const __m512d x = _mm512_castps_pd(t[2 * j]), y = _mm512_castps_pd(t[2 * j + 1]);
    u[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                                  _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                                  _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
}

/// e^x for 16 lanes: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, times 2^n (scalef).
/// Relative error ~2 ulp; -inf -> 0.
[[nodiscard]] inline __m512 exp16(__m512 x) noexcept {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/// A growable 64-byte-aligned scratch buffer (contents are not kept on growth).
class scratch_buffer {
 public:
  scratch_buffer() = default;
  scratch_buffer(const scratch_buffer&) = delete;
  scratch_buffer& operator=(const scratch_buffer&) = delete;
  ~scratch_buffer() { std::free(data_); }

  template <class T>
  [[nodiscard]] T* get(int64_t count) {
    const auto bytes = static_cast<size_t>(round_up(count * static_cast<int64_t>(sizeof(T)), 64));
    if (bytes > size_) {
      std::free(data_);
      data_ = std::aligned_alloc(64, bytes);
      if (!data_)
        throw std::bad_alloc();
      size_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moe::fast

MOE_FAST_TARGET_END
