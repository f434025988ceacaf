// kernels/dtype.hpp
// Element types of checkpoint tensors and their conversions to and from fp32.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

namespace moe {

enum class dtype : uint8_t { f32, f16, bf16, f8_e4m3, i64, i32 };

/// Bytes per element.
[[nodiscard]] constexpr int64_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::f8_e4m3: return 1;
    case dtype::i64: return 8;
    case dtype::i32: return 4;
  }
  return 0;
}

/// safetensors spelling: "F32", "F16", "BF16", "F8_E4M3", "I64", "I32".
[[nodiscard]] std::string_view dtype_name(dtype t) noexcept;
/// Inverse of dtype_name; false for a dtype moeserve does not read.
[[nodiscard]] bool parse_dtype(std::string_view name, dtype& out) noexcept;

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32 bits.
[[nodiscard]] inline float bf16_to_f32(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// f32 -> bf16, round to nearest even; NaN stays NaN.
[[nodiscard]] inline uint16_t f32_to_bf16(float x) noexcept {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE half -> f32 (exact).
[[nodiscard]] float f16_to_f32(uint16_t bits) noexcept;
/// f32 -> IEEE half, round to nearest even.
[[nodiscard]] uint16_t f32_to_f16(float x) noexcept;

// float8 e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, 0x7f/0xff NaN,
// largest finite 448 (0x7e).
[[nodiscard]] constexpr float fp8_e4m3_value(uint8_t bits) noexcept {
  const int sign = bits >> 7, exp = (bits >> 3) & 0xf, man = bits & 0x7;
  if (exp == 0xf && man == 0x7)
    return std::numeric_limits<float>::quiet_NaN();
  float mag = exp == 0 ? static_cast<float>(man) / 8.0f / 64.0f  // 2^-6 * m/8
                       : (1.0f + static_cast<float>(man) / 8.0f) *
                           (exp >= 7 ? static_cast<float>(1 << (exp - 7))
                                     : 1.0f / static_cast<float>(1 << (7 - exp)));
  return sign ? -mag : mag;
}

/// All 256 e4m3fn values, for table-driven decoding.
inline constexpr std::array<float, 256> fp8_e4m3_table = [] {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i)
    t[i] = fp8_e4m3_value(static_cast<uint8_t>(i));
  return t;
}();

[[nodiscard]] inline float fp8_e4m3_to_f32(uint8_t bits) noexcept { return fp8_e4m3_table[bits]; }

/// f32 -> e4m3fn, round to nearest even, saturating to +-448; NaN -> 0x7f.
[[nodiscard]] uint8_t f32_to_fp8_e4m3(float x) noexcept;

/// Reads element `i` of a buffer of type `t` as f32 (F32, F16, BF16, F8_E4M3 only).
[[nodiscard]] inline float load_as_f32(dtype t, const void* data, int64_t i) noexcept {
  switch (t) {
    case dtype::f32: return static_cast<const float*>(data)[i];
    case dtype::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case dtype::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case dtype::f8_e4m3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    default: return 0.0f;
  }
}

/// How a linear weight's elements sit in memory.
enum class weight_layout : uint8_t {
  row_major,  // W[o][i] at o * in_features + i
  /// FP8 only, in_features a multiple of 64: 64-row panels, in each panel the column pairs
  /// (2kp, 2kp + 1) one after another, 128 bytes each, laid out so that fp8x64_to_bf16_scaled
  /// turns its two 64-byte halves into the bf16 pairs of rows 0-15, 16-31 (first half) and 32-47,
  /// 48-63 (second): what a dpbf16 against a broadcast activation pair wants, with no transpose
  /// (fp8_panel_offset). The storage always holds whole panels: where out_features is not a
  /// multiple of 64, the last panel's missing rows are zero bytes (fp8_panels_bytes). The
  /// checkpoint loader repacks FP8 weights whose sides are multiples of 64 this way in place
  /// where it copies them (weight_memory::copy, fp8_panels_fit), the fast path's load the others
  /// into padded copies: batch-1 GEMV over panels reads no activations per weight byte and sums
  /// no lanes across.
  fp8_panels,
};

/// Rows per FP8 panel (weight_layout::fp8_panels).
inline constexpr int64_t fp8_panel_rows = 64;

/// Whether an FP8 weight [out_features, in_features] takes weight_layout::fp8_panels in its own
/// bytes (no padding).
[[nodiscard]] constexpr bool fp8_panels_fit(int64_t out_features, int64_t in_features) noexcept {
  return out_features > 0 && in_features > 0 && out_features % fp8_panel_rows == 0 && in_features % 64 == 0;
}

/// Bytes of weight_layout::fp8_panels storage for [out_features, in_features]: whole panels.
[[nodiscard]] constexpr int64_t fp8_panels_bytes(int64_t out_features, int64_t in_features) noexcept {
  return (out_features + fp8_panel_rows - 1) / fp8_panel_rows * fp8_panel_rows * in_features;
}

/// Byte offset of W[o][i] in weight_layout::fp8_panels (in_features columns). Within a panel's
/// 128 bytes for a column pair: half c = r / 32 of the panel row r, then 16-byte lane group
/// (r % 16) / 4, then 8 bytes for rows 16-31 of the half, then the pair's two bytes.
[[nodiscard]] constexpr int64_t fp8_panel_offset(int64_t o, int64_t i, int64_t in_features) noexcept {
  const int64_t r = o % fp8_panel_rows, j = r % 16;
  return (o / fp8_panel_rows) * fp8_panel_rows * in_features + (i / 2) * 128 + (r / 32) * 64 + (j / 4) * 16 +
         ((r % 32) / 16) * 8 + (j % 4) * 2 + i % 2;
}

}  // namespace moe
