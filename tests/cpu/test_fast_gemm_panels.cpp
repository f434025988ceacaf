// tests/cpu/test_fast_gemm_panels.cpp
// A BF16 weight packed ahead into GEMM panels: every row count reads the packed copy (it still
// gives the old values after the stored weight is overwritten), its rows are bit for bit what
// packing per call gives, on any thread count and with a short last panel; only BF16 is packed,
// and prepare_fast_weights packs every BF16 weight of a model once, pads a row-major FP8 weight
// whose rows do not fill its last panel into FP8 panels, and leaves the rest.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
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
    for (const int64_t tokens : {1, 3, 9, 17, 40}) {  // GEMV and GEMM sizes of FP8 panels
      CAPTURE(tokens);
      const std::vector<float> x = test::random_floats(tokens * in, 11u + static_cast<uint32_t>(tokens));
      const std::vector<float> expected = test::run_linear(fast1, o->w, x, tokens);
      for (backend* b :
           {static_cast<backend*>(&fast1), static_cast<backend*>(&fast2), static_cast<backend*>(&fast3)})
        CHECK(test::same_bits(test::run_linear(*b, packed, x, tokens), expected));
    }
    // overwrite the stored weight: one row and 17 rows still compute with the packed copy
    const std::vector<float> x = test::random_floats(17 * in, 5u);
    const std::vector<float> x1(x.begin(), x.begin() + in);
    const std::vector<float> before = test::run_linear(fast2, packed, x, 17);
    const std::vector<float> one_before = test::run_linear(fast2, packed, x1, 1);
    CHECK(std::any_of(one_before.begin(), one_before.end(), [](float v) { return v != 0.0f; }));
    std::memset(o->bytes.data(), 0, o->bytes.size());
    CHECK(test::same_bits(test::run_linear(fast2, packed, x, 17), before));
    CHECK(test::same_bits(test::run_linear(fast2, packed, x1, 1), one_before));
    const std::vector<float> unpacked = test::run_linear(fast2, o->w, x1, 1);
    CHECK(std::all_of(unpacked.begin(), unpacked.end(), [](float v) { return v == 0.0f; }));
  }
}

TEST_CASE("fast: prepare_fast_weights packs each BF16 weight once and pads FP8 rows into whole panels") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const std::unique_ptr<test::owned_weight> fp8 = test::random_weight(dtype::f8_e4m3, 64, 128, 3u);
  CHECK_THROWS_AS((void)fast::pack_gemm_panels(fp8->w), std::invalid_argument);
  const std::unique_ptr<test::owned_weight> bf16 = test::random_weight(dtype::bf16, 70, 64, 4u);
  const std::unique_ptr<test::owned_weight> gate = test::random_weight(dtype::bf16, 64, 128, 5u);
  const std::unique_ptr<test::owned_weight> kv_a = test::random_weight(dtype::f8_e4m3, 96, 128, 6u);
  CHECK_THROWS_AS((void)fast::pad_fp8_panels(bf16->w), std::invalid_argument);
  model_weights w;
  w.lm_head = fp8->w;
  fast::prepare_fast_weights(w);  // nothing to lay out: no-op
  CHECK(w.lm_head.gemm_panels == nullptr);
  CHECK(w.lm_head.data == fp8->w.data);
  CHECK(w.fast_copies.empty());
  // V3's FP8 checkpoints: a BF16 lm_head and routers beside FP8 projections and experts
  w.lm_head = bf16->w;
  w.layers.resize(2);
  for (layer_weights& l : w.layers) {
    l.attn.o_proj = fp8->w;
    l.attn.kv_a_proj_with_mqa = kv_a->w;
    l.moe.gate = gate->w;
    l.moe.experts.push_back({fp8->w, fp8->w, fp8->w});
  }
  fast::prepare_fast_weights(w);
  CHECK(w.fast_copies.size() == 1);  // lm_head, 2 routers, 2 kv_a: one buffer
  REQUIRE(w.lm_head.gemm_panels != nullptr);
  for (const layer_weights& l : w.layers) {
    CHECK(l.moe.gate.gemm_panels != nullptr);
    CHECK(l.attn.o_proj.gemm_panels == nullptr);  // FP8 whose rows fill panels: left as is
    CHECK(l.attn.o_proj.data == fp8->w.data);
    CHECK(l.moe.experts[0].down_proj.data == fp8->w.data);
    const linear_weight& k = l.attn.kv_a_proj_with_mqa;
    CHECK(k.layout == weight_layout::fp8_panels);
    CHECK(k.data != kv_a->w.data);
    for (int64_t o = 0; o < 96; o += 5)
      for (int64_t i = 0; i < 128; i += 3)
        CHECK(k.at(o, i) == kv_a->w.at(o, i));
    // rows 96..127 of the last panel are zero bytes
    const auto* bytes = static_cast<const uint8_t*>(k.data);
    for (int64_t i = 0; i < 128; ++i)
      CHECK(bytes[fp8_panel_offset(96 + i % 32, i, 128)] == 0);
  }
  CHECK(w.layers[0].moe.gate.gemm_panels != w.layers[1].moe.gate.gemm_panels);
  // panel 0 holds rows 0..63 as column pairs: pair 0 of row j at [j * 2, j * 2 + 1]
  const auto* stored = reinterpret_cast<const uint16_t*>(bf16->bytes.data());
  for (int64_t j = 0; j < 64; ++j) {
    CHECK(w.lm_head.gemm_panels[j * 2] == stored[j * 64]);
    CHECK(w.lm_head.gemm_panels[j * 2 + 1] == stored[j * 64 + 1]);
  }
  const uint16_t* again = w.lm_head.gemm_panels;
  fast::prepare_fast_weights(w);  // laid out once
  CHECK(w.lm_head.gemm_panels == again);
  CHECK(w.fast_copies.size() == 1);
}
