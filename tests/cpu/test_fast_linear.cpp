// tests/cpu/test_fast_linear.cpp
// The fast backend's linear (GEMV and GEMM paths, every weight dtype) against the reference, and
// the in-register e4m3 expansion against the dtype table for all 256 codes.
#include <doctest/doctest.h>

#include <cstring>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

TEST_CASE("fast: e4m3 -> bf16 expansion is exact for all 256 codes, NaN stays NaN") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  alignas(64) uint8_t codes[256];
  for (int i = 0; i < 256; ++i)
    codes[i] = static_cast<uint8_t>(i);
  const fast::fp8_tables tables = fast::load_fp8_tables();
  for (int base = 0; base < 256; base += 64) {
    __m512i u0, u1;
    fast::fp8x64_to_bf16(_mm512_load_si512(codes + base), tables, u0, u1);
    alignas(64) uint16_t out[64];
    _mm512_store_si512(out, fast::unpack_to_natural_lo(u0, u1));
    _mm512_store_si512(out + 32, fast::unpack_to_natural_hi(u0, u1));
    for (int i = 0; i < 64; ++i) {
      const float want = fp8_e4m3_value(static_cast<uint8_t>(base + i));
      const float got = bf16_to_f32(out[i]);
      if (std::isnan(want))
        CHECK(std::isnan(got));
      else
        CHECK(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
    }
  }
}

namespace {

std::vector<float> run_linear(backend& b, const linear_weight& w, const std::vector<float>& x,
                              int64_t num_tokens) {
  std::vector<float> out(static_cast<size_t>(num_tokens * w.out_features), -1.0f);
  b.linear({.x = x.data(), .w = &w, .out = out.data(), .num_tokens = num_tokens});
  return out;
}

}  // namespace

TEST_CASE("fast: linear matches the reference for every weight dtype, GEMV and GEMM sizes") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast2(2), fast1(1);
  struct shape {
    int64_t out, in;
  };
  for (dtype type : {dtype::bf16, dtype::f8_e4m3, dtype::f32, dtype::f16}) {
    // Partial 128-blocks (200 x 320), a tall one (300 x 1024), odd inner sizes.
    for (shape s : {shape{200, 320}, shape{300, 1024}, shape{70, 77}, shape{129, 160}}) {
      const auto w = test::random_weight(type, s.out, s.in, 7u + static_cast<uint32_t>(s.out));
      for (int64_t tokens : {1, 3, 4, 5, 8, 9, 17, 64, 200}) {
        CAPTURE(dtype_name(type));
        CAPTURE(s.out);
        CAPTURE(s.in);
        CAPTURE(tokens);
        const auto x = test::random_floats(tokens * s.in, 11u + static_cast<uint32_t>(tokens));
        const auto want = run_linear(ref, w->w, x, tokens);
        const auto got = run_linear(fast2, w->w, x, tokens);
        // bf16 activations (FP8: times the block scale): relative rounding <= 2^-9 per product;
        // F32 / F16 weights keep fp32 activations.
        const bool rounded = type == dtype::bf16 || type == dtype::f8_e4m3;
        CHECK(test::max_rel_error(got, want) < (rounded ? 1e-2 : 1e-5));
        const auto got1 = run_linear(fast1, w->w, x, tokens);
        CHECK(std::memcmp(got.data(), got1.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}
