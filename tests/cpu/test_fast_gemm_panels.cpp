// tests/cpu/test_fast_gemm_panels.cpp
// A BF16 weight packed ahead into GEMM panels: the GEMM reads the packed copy (it still gives
// the old values after the stored weight is overwritten; the GEMV reads the stored weight), its
// rows are bit for bit what packing per call gives, on any thread count and with a short last
// panel; only BF16 is packed, and prepack_lm_head packs a BF16 lm_head and nothing else.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/gemm_panels.hpp"
#include "test_fast_util.hpp"

using namespace moe;

TEST_CASE("fast: a GEMM over a weight packed ahead equals packing per call, and reads the packed copy") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_fast_backend fast1(1), fast2(2), fast3(3);
  // 300 rows: four whole panels and a short one of 44; 1000 inputs: a partial 32-pair step
  for (const auto& [rows, in] : {std::pair<int64_t, int64_t>{300, 1000}, {64, 256}, {129, 96}}) {
    CAPTURE(rows);
    CAPTURE(in);
    const std::unique_ptr<test::owned_weight> o = test::random_weight(dtype::bf16, rows, in, 7u);
    linear_weight packed = o->w;
    const std::shared_ptr<const uint16_t> panels = fast::pack_gemm_panels(o->w);
    packed.gemm_panels = panels.get();
    for (const int64_t tokens : {9, 17, 40}) {              // GEMM shapes (> gemv_max_rows)
      CAPTURE(tokens);
      const std::vector<float> x = test::random_floats(tokens * in, 11u + static_cast<uint32_t>(tokens));
      const std::vector<float> expected = test::run_linear(fast1, o->w, x, tokens);
      for (backend* b : {static_cast<backend*>(&fast1), static_cast<backend*>(&fast2), static_cast<backend*>(&fast3)})
        CHECK(test::same_bits(test::run_linear(*b, packed, x, tokens), expected));
    }
    // overwrite the stored weight: the GEMM still computes with the packed copy, the GEMV does not
    const std::vector<float> x = test::random_floats(17 * in, 5u);
    const std::vector<float> before = test::run_linear(fast2, packed, x, 17);
    const std::vector<float> x1(x.begin(), x.begin() + in);
    const std::vector<float> gemv_before = test::run_linear(fast2, packed, x1, 1);
    std::memset(o->bytes.data(), 0, o->bytes.size());
    CHECK(test::same_bits(test::run_linear(fast2, packed, x, 17), before));
    const std::vector<float> gemv_after = test::run_linear(fast2, packed, x1, 1);
    CHECK_FALSE(test::same_bits(gemv_after, gemv_before));
    CHECK(std::all_of(gemv_after.begin(), gemv_after.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_CASE("fast: only BF16 weights are packed ahead; prepack_lm_head packs a BF16 lm_head") {
  const std::unique_ptr<test::owned_weight> fp8 = test::random_weight(dtype::f8_e4m3, 64, 128, 3u);
  CHECK_THROWS_AS((void)fast::pack_gemm_panels(fp8->w), std::invalid_argument);
  const std::unique_ptr<test::owned_weight> bf16 = test::random_weight(dtype::bf16, 70, 64, 4u);
  model_weights w;
  w.lm_head = fp8->w;
  fast::prepack_lm_head(w);                                 // no-op
  CHECK(w.lm_head.gemm_panels == nullptr);
  CHECK(w.lm_head_panels == nullptr);
  w.lm_head = bf16->w;
  fast::prepack_lm_head(w);
  REQUIRE(w.lm_head.gemm_panels != nullptr);
  CHECK(w.lm_head.gemm_panels == w.lm_head_panels.get());
  // panel 0 holds rows 0..63 as column pairs: pair 0 of row j at [j * 2, j * 2 + 1]
  const auto* stored = reinterpret_cast<const uint16_t*>(bf16->bytes.data());
  for (int64_t j = 0; j < 64; ++j) {
    CHECK(w.lm_head.gemm_panels[j * 2] == stored[j * 64]);
    CHECK(w.lm_head.gemm_panels[j * 2 + 1] == stored[j * 64 + 1]);
  }
  const uint16_t* again = w.lm_head.gemm_panels;
  fast::prepack_lm_head(w);                                 // packed once
  CHECK(w.lm_head.gemm_panels == again);
}
