// kernels/dtype.cpp
// Conversions that are too long to inline: names, IEEE half, and rounding to e4m3fn.
#include "kernels/dtype.hpp"

namespace moe {

std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::f8_e4m3: return "F8_E4M3";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
  }
  return "?";
}

bool parse_dtype(std::string_view name, dtype& out) noexcept {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3, dtype::i64, dtype::i32})
    if (dtype_name(t) == name) {
      out = t;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float mag = std::ldexp(static_cast<float>(man), -24);
    return sign ? -mag : mag;
  }
  if (exp == 0x1f)  // inf / nan
    return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (man << 13));
}

uint16_t f32_to_f16(float x) noexcept {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(x);
  if (std::isnan(x))
    return sign | 0x7e00u;
  if (a >= 65520.0f)  // rounds to inf
    return sign | 0x7c00u;
  if (a < 6.103515625e-05f) {                         // subnormal half: units of 2^-24
    const float q = std::nearbyint(a * 16777216.0f);  // default rounding mode: to even
    return sign | static_cast<uint16_t>(q);
  }
  int e = 0;
  const float m = std::frexp(a, &e);      // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint(m * 2048.0f);  // 11 significant bits
  if (q >= 2048.0f) {
    q /= 2.0f;
    ++e;
  }
  const uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  return sign | static_cast<uint16_t>((exp << 10) | (static_cast<uint32_t>(q) & 0x3ffu));
}

uint8_t f32_to_fp8_e4m3(float x) noexcept {
  if (std::isnan(x))
    return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  float a = std::fabs(x);
  if (a >= 448.0f)
    return sign | 0x7e;
  if (a < 0.015625f) {                           // subnormal: units of 2^-9
    const float q = std::nearbyint(a * 512.0f);  // q in 0..8; 8 is the smallest normal
    return sign | static_cast<uint8_t>(q);
  }
  int e = 0;
  const float m = std::frexp(a, &e);    // a = m * 2^e
  float q = std::nearbyint(m * 16.0f);  // 4 significant bits, 8..16
  if (q >= 16.0f) {
    q /= 2.0f;
    ++e;
  }
  const int exp = e - 1 + 7;
  if (exp > 15 || (exp == 15 && static_cast<int>(q) - 8 == 7))
    return sign | 0x7e;
  return sign | static_cast<uint8_t>((exp << 3) | (static_cast<int>(q) - 8));
}

}  // namespace moe
