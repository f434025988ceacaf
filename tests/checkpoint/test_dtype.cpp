// tests/checkpoint/test_dtype.cpp
// Element-type conversions against hand-computed values (model-spec 1.1).
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/dtype.hpp"

using namespace moe;

TEST_CASE("fp8 e4m3fn decodes the values of the spec") {
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0xB8) == -1.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(fp8_e4m3_to_f32(0x07) == 7.0f / 512.0f);         // largest subnormal: 2^-6 * 7/8
  CHECK(fp8_e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(fp8_e4m3_to_f32(0x7E) == 448.0f);                // largest finite
  CHECK(fp8_e4m3_to_f32(0xFE) == -448.0f);
  CHECK(fp8_e4m3_to_f32(0x3A) == 1.25f);
  CHECK(fp8_e4m3_to_f32(0x00) == 0.0f);
  CHECK(std::signbit(fp8_e4m3_to_f32(0x80)));
  CHECK(std::isnan(fp8_e4m3_to_f32(0x7F)));  // no infinities: 0x7f/0xff are NaN
  CHECK(std::isnan(fp8_e4m3_to_f32(0xFF)));
  CHECK(std::isfinite(fp8_e4m3_to_f32(0x78)));  // exponent 15 is finite except m=7
}

TEST_CASE("f32 -> fp8 e4m3fn rounds to nearest even and saturates") {
  CHECK(f32_to_fp8_e4m3(1.0f) == 0x38);
  CHECK(f32_to_fp8_e4m3(-1.0f) == 0xB8);
  CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);  // halfway 1.0 / 1.125 -> even mantissa 0
  CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3A);  // halfway 1.125 / 1.25 -> even mantissa 2
  CHECK(f32_to_fp8_e4m3(1.05f) == 0x38);
  CHECK(f32_to_fp8_e4m3(1.07f) == 0x39);                         // just above halfway
  CHECK(f32_to_fp8_e4m3(-300.0f) == 0xF9);                       // nearest of -288 (0xF9) and -320
  CHECK(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)) == 0x00);         // half the smallest subnormal
  CHECK(f32_to_fp8_e4m3(3.0f * std::ldexp(1.0f, -10)) == 0x02);  // 1.5 subnormal units -> 2
  CHECK(f32_to_fp8_e4m3(448.0f) == 0x7E);
  CHECK(f32_to_fp8_e4m3(460.0f) == 0x7E);  // saturates instead of reaching NaN
  CHECK(f32_to_fp8_e4m3(1.0e6f) == 0x7E);
  CHECK(f32_to_fp8_e4m3(-1.0e6f) == 0xFE);
  CHECK(f32_to_fp8_e4m3(INFINITY) == 0x7E);
  CHECK(f32_to_fp8_e4m3(NAN) == 0x7F);
  // Every finite code survives a round trip.
  int mismatches = 0;
  for (int b = 0; b < 256; ++b)
    if (b != 0x7F && b != 0xFF && f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(b))) != b)
      ++mismatches;
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 conversions: exact widening, round-to-nearest-even narrowing") {
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_to_f32(0xC000) == -2.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);         // halfway -> even (…80)
  CHECK(f32_to_bf16(1.0f + 3.0f * std::ldexp(1.0f, -8)) == 0x3F82);  // halfway -> even (…82)
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);  // above half
  CHECK(f32_to_bf16(-3.140625f) == 0xC049);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  CHECK(f32_to_bf16(INFINITY) == 0x7F80);
}

TEST_CASE("f16 conversions round-trip every finite half and round to nearest even") {
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0xC000) == -2.0f);
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // halfway -> even
  CHECK(f32_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3C02);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // rounds to infinity
  CHECK(f32_to_f16(std::ldexp(1.0f, -26)) == 0x0000);
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h)  // skip inf / NaN
    if ((h & 0x7C00u) != 0x7C00u && f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))) != h)
      ++mismatches;
  CHECK(mismatches == 0);
}

TEST_CASE("dtype names follow safetensors") {
  dtype t{};
  CHECK(parse_dtype("F8_E4M3", t));
  CHECK(t == dtype::f8_e4m3);
  CHECK(dtype_size(t) == 1);
  CHECK(parse_dtype("BF16", t));
  CHECK(t == dtype::bf16);
  CHECK_FALSE(parse_dtype("F64", t));
  CHECK(dtype_name(dtype::f32) == "F32");
}
