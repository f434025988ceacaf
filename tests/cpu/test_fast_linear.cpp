// tests/cpu/test_fast_linear.cpp
// The fast backend's linear (GEMV and GEMM paths, every weight dtype) against the reference, and
// the in-register e4m3 expansion (a scaled bit permutation) against by-hand values for all 256
// codes, and the batch-1 FP8 GEMV against a by-hand sum.
#include <doctest/doctest.h>

#include <array>
#include <cstring>

#include "avx512_fp8_codes.hpp"
#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_simd.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

std::vector<float> run_linear(backend& b, const linear_weight& w, const std::vector<float>& x,
                              int64_t num_tokens) {
  std::vector<float> out(static_cast<size_t>(num_tokens * w.out_features), -1.0f);
  b.linear({.x = x.data(), .w = &w, .out = out.data(), .num_tokens = num_tokens});
  return out;
}

}  // namespace

TEST_CASE("fast: scaled e4m3 -> bf16 bit permutation is the value times 2^-120 for every code but NaN") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const auto out = testing::fp8_codes_scaled_to_bf16();
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f)
      continue;  // NaN: documented as a finite value
    CAPTURE(code);
    // By hand: sign, exponent e (bias 7) and mantissa m of the code; subnormal when e == 0.
    const int e = (code >> 3) & 15, m = code & 7;
    const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    const double want = (code & 0x80) ? -magnitude : magnitude;
    CHECK(std::ldexp(static_cast<double>(bf16_to_f32(out[code])), fast::fp8_scaled_shift) == want);
    // Subnormal codes land on bf16 subnormals (exponent field 0), which vdpbf16ps reads as 0.
    CHECK(((out[code] >> 7) & 0xff) == (e == 0 ? 0 : e));
    CHECK(fast::fp8_to_bf16_scaled(static_cast<uint8_t>(code)) == out[code]);  // the GEMM's scalar gather
  }
}

TEST_CASE("fast: batch-1 FP8 GEMV equals a by-hand sum, with subnormal weights read as zero") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  // Rows of 1024 (the sequential batch-1 kernel) and 320 (the row-group kernel, a partial
  // 128-block); row 0 holds only subnormal codes, row 1 only normal ones, the rest anything.
  for (int64_t in : {int64_t{1024}, int64_t{320}}) {
    CAPTURE(in);
    const int64_t out = 130;  // two scale row blocks, the second partial
    auto w = test::random_weight(dtype::f8_e4m3, out, in, 5u);
    for (int64_t i = 0; i < in; ++i) {
      w->bytes[i] = static_cast<uint8_t>(1 + i % 7) | static_cast<uint8_t>(i % 2 ? 0x80 : 0);
      w->bytes[in + i] = static_cast<uint8_t>(0x08 + i % 0x70) | static_cast<uint8_t>(i % 3 ? 0 : 0x80);
    }
    const auto x = test::random_floats(in, 17u, 3.0f);
    cpu_fast_backend fast(2);
    test::check_fp8_gemv_by_hand(*w, run_linear(fast, w->w, x, 1), x);
  }
}

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
        // bf16 activations (FP8: times the block scale): relative rounding <= 2^-8 per product;
        // F32 / F16 weights keep fp32 activations.
        const bool rounded = type == dtype::bf16 || type == dtype::f8_e4m3;
        CHECK(test::max_rel_error(got, want) < (rounded ? 1e-2 : 1e-5));
        const auto got1 = run_linear(fast1, w->w, x, tokens);
        CHECK(std::memcmp(got.data(), got1.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("fast: a row's result does not depend on the other rows of its call, for every weight kind") {
  // A topology batches tokens differently (the cluster's micro-batches and ranks against one
  // rank's whole batch, an expert's rows on one rank against another), so a token must come out
  // bit for bit the same alone or with up to 19 others: across the GEMV / GEMM switch of FP8
  // panels (8 rows) and the GEMM's 6-row tiles. FP8 weights carry subnormal codes, which the
  // GEMV reads as zero.
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_fast_backend fast(2);
  const int64_t out = 448, in = 1024;  // 7 panels: tasks of 2 at batch 1
  auto fp8 = test::random_weight(dtype::f8_e4m3, out, in, 41u);
  for (int64_t i = 0; i < in; i += 37)  // sprinkle subnormal codes
    fp8->bytes[static_cast<size_t>((i % out) * in + i)] = static_cast<uint8_t>(1 + i % 7);
  const auto panels = test::to_fp8_panels(*fp8);
  const auto bf16 = test::random_weight(dtype::bf16, out, in, 43u);
  linear_weight bf16_packed = bf16->w;
  const std::shared_ptr<const uint16_t> packed = fast::pack_gemm_panels(bf16->w);
  bf16_packed.gemm_panels = packed.get();
  const auto x = test::random_floats(20 * in, 45u);
  const std::pair<const char*, const linear_weight*> kinds[] = {{"fp8 panels", &panels->w},
                                                                {"fp8 row-major", &fp8->w},
                                                                {"bf16 packed", &bf16_packed},
                                                                {"bf16", &bf16->w}};
  for (const auto& [name, w] : kinds) {
    CAPTURE(name);
    std::vector<std::vector<float>> alone;
    for (int64_t t = 0; t < 20; ++t)
      alone.push_back(
        run_linear(fast, *w, std::vector<float>(x.begin() + t * in, x.begin() + (t + 1) * in), 1));
    for (const int64_t rows : {2, 5, 6, 7, 8, 9, 13, 20}) {
      CAPTURE(rows);
      const std::vector<float> together =
        run_linear(fast, *w, std::vector<float>(x.begin(), x.begin() + rows * in), rows);
      for (int64_t t = 0; t < rows; ++t) {
        CAPTURE(t);
        CHECK(std::memcmp(together.data() + t * out, alone[t].data(), out * sizeof(float)) == 0);
      }
    }
  }
}
