// tests/model/test_fp8_quantize.cpp
// FP8 block quantisation at load (--lm-head-fp8): hand-checked scales and codes (the block's
// largest magnitude lands on 448, ties to even, an all-zero block, a block of subnormals), every
// element within half an e4m3 step, panels equal to row-major, and a model whose lm_head is
// quantised gives the same logits on the fast path as on the reference within the fast path's
// tolerance, its tied embedding untouched. (test_logits_vs_numpy.sh checks the logits against an
// independent NumPy quantisation.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/forward.hpp"
#include "kernels/model/fp8_quantize.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

// An f32 weight [out, in] owned by `w`, element (o, i) = f(o, i).
template <class F>
linear_weight f32_weight(model_weights& w, int64_t out, int64_t in, F f) {
  std::vector<float> v(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      v[static_cast<size_t>(o * in + i)] = f(o, i);
  w.owned.push_back(std::move(v));
  return {.type = dtype::f32, .data = w.owned.back().data(), .out_features = out, .in_features = in};
}

float scale_of(const linear_weight& q, int64_t block_row, int64_t block_col) {
  return q.scale_inv[block_row * ((q.in_features + 127) / 128) + block_col];
}

}  // namespace

TEST_CASE("FP8 block quantisation: scales amax / 448, codes to nearest even, partial and degenerate blocks") {
  model_weights owner;
  // [192, 200]: row blocks of 128 and 64, column blocks of 128 and 72.
  //   block (0, 0): 448 at (5, 7) sets the scale to 1; 17 sits halfway between 16 and 18 -> 16;
  //                 19 halfway between 18 and 20 -> 20; the rest small
  //   block (0, 1): all zero -> scale 1, codes 0
  //   block (1, 0): magnitudes <= 1e-40 (subnormal floats) -> scale 2^-126
  //   block (1, 1): a ramp with amax 0.75 -> scale 0.75 / 448
  const linear_weight w = f32_weight(owner, 192, 200, [](int64_t o, int64_t i) -> float {
    if (o < 128 && i < 128) {
      if (o == 5 && i == 7)
        return 448.0f;
      if (o == 6 && i == 7)
        return 17.0f;
      if (o == 6 && i == 8)
        return -19.0f;
      return 0.01f * static_cast<float>((o * 7 + i) % 13 - 6);
    }
    if (o < 128)
      return 0.0f;
    if (i < 128)
      return (o + i) % 2 ? 1e-40f : -5e-41f;
    return 0.75f * static_cast<float>((o - 128) * 72 + (i - 128)) / (64.0f * 72.0f - 1.0f);
  });
  const linear_weight q = quantize_to_fp8(w, weight_layout::row_major, owner);
  REQUIRE(q.type == dtype::f8_e4m3);
  CHECK(q.block_rows == 128);
  CHECK(q.block_cols == 128);
  CHECK(scale_of(q, 0, 0) == 1.0f);
  CHECK(scale_of(q, 0, 1) == 1.0f);
  CHECK(scale_of(q, 1, 0) == std::ldexp(1.0f, -126));
  CHECK(scale_of(q, 1, 1) == 0.75f / 448.0f);
  const auto* codes = static_cast<const uint8_t*>(q.data);
  CHECK(codes[5 * 200 + 7] == 0x7E);  // 448
  CHECK(q.at(6, 7) == 16.0f);
  CHECK(q.at(6, 8) == -20.0f);
  CHECK(codes[191 * 200 + 199] == 0x7E);  // the ramp's end is its block's amax
  CHECK(q.at(0, 130) == 0.0f);
  // every element within half a step of e4m3 at its block's scale (subnormal steps: 2^-9)
  for (int64_t o = 0; o < 192; ++o)
    for (int64_t i = 0; i < 200; ++i) {
      const float x = w.at(o, i), s = scale_of(q, o / 128, i / 128), v = std::fabs(x / s);
      const float half_step = v < std::ldexp(1.0f, -6) ? std::ldexp(1.0f, -10)
                                                       : std::ldexp(1.0f, std::ilogb(v) - 4);
      if (std::fabs(q.at(o, i) - x) > half_step * s * 1.0001f)
        FAIL_CHECK("element (" << o << ", " << i << "): " << x << " -> " << q.at(o, i));
    }
  CHECK_THROWS_AS((void)quantize_to_fp8(w, weight_layout::fp8_panels, owner), std::invalid_argument);
}

TEST_CASE("FP8 block quantisation into panels reads back as row-major, BF16 input included") {
  model_weights owner;
  const linear_weight w = f32_weight(owner, 192, 256, [](int64_t o, int64_t i) {
    return std::sin(0.37f * static_cast<float>(o) + 0.11f * static_cast<float>(i)) *
           (1.0f + static_cast<float>(o % 5));
  });
  const linear_weight rows = quantize_to_fp8(w, weight_layout::row_major, owner);
  const linear_weight panels = quantize_to_fp8(w, weight_layout::fp8_panels, owner);
  CHECK(panels.layout == weight_layout::fp8_panels);
  // the same weight rounded to BF16 first: a BF16 weight is quantised from its own values
  std::vector<uint16_t> b(192 * 256);
  for (int64_t k = 0; k < 192 * 256; ++k)
    b[static_cast<size_t>(k)] = f32_to_bf16(w.at(k / 256, k % 256));
  const linear_weight wb{.type = dtype::bf16, .data = b.data(), .out_features = 192, .in_features = 256};
  const linear_weight from_bf16 = quantize_to_fp8(wb, weight_layout::row_major, owner);
  int64_t differ = 0;
  for (int64_t o = 0; o < 192; ++o)
    for (int64_t i = 0; i < 256; ++i) {
      REQUIRE(panels.at(o, i) == rows.at(o, i));
      differ += static_cast<const uint8_t*>(from_bf16.data)[from_bf16.index(o, i)] !=
                static_cast<const uint8_t*>(rows.data)[rows.index(o, i)];
    }
  CHECK(differ > 0);               // BF16 rounding moves a few codes,
  CHECK(differ < 192 * 256 / 20);  // not most
  CHECK(owner.requantized.size() == 3);
}

TEST_CASE("--lm-head-fp8: the lm_head becomes FP8, the tied embedding stays, fast equals reference") {
  model_weights w =
    testing::tiny_model_builder(5, testing::tiny_weights::fp8).build(testing::panel_config(1024));
  w.config.tie_word_embeddings = true;  // as the loader binds a tied head
  w.lm_head = w.embed_tokens;
  const linear_weight embed = w.embed_tokens;
  const int64_t bytes_before = weight_bytes_per_token(w);
  quantize_lm_head_fp8(w, /*panels=*/true);
  REQUIRE(w.lm_head.type == dtype::f8_e4m3);
  CHECK(w.lm_head.layout == weight_layout::fp8_panels);  // 1024 x 128 fits the panels
  CHECK(w.embed_tokens.data == embed.data);
  CHECK(w.embed_tokens.type == embed.type);
  CHECK(bytes_before - weight_bytes_per_token(w) == 1024 * 128 * 3 - 4 * 8);  // f32 -> e4m3, plus 8 scales
  const void* fp8_head = w.lm_head.data;
  quantize_lm_head_fp8(w, /*panels=*/true);  // FP8 already: left alone
  CHECK(w.lm_head.data == fp8_head);

  const std::vector<int32_t> prompt = {1, 900, 17, 513, 64, 1023, 2, 300};
  auto logits = [&](backend& b) {
    kv_cache cache(w.config.num_hidden_layers, 8, 4, w.config.kv_cache_dim());
    model_runner runner(w, b, cache, {});
    sequence_kv kv;
    std::vector<float> all = runner.prefill(prompt, kv, 1 << 20, /*all_logits=*/true);
    kv.release(cache);
    return all;
  };
  const std::unique_ptr<backend> ref = make_cpu_reference_backend();
  const std::vector<float> expected = logits(*ref);
  if (!cpu_fast_path_supported()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs");
    return;
  }
  fast::prepare_fast_weights(w);
  const std::unique_ptr<backend> fast = make_cpu_backend(/*reference=*/false, 2);
  const std::vector<float> got = logits(*fast);
  REQUIRE(got.size() == expected.size());
  float max_ref = 1.0f, max_diff = 0.0f;
  for (size_t k = 0; k < got.size(); ++k) {
    max_ref = std::max(max_ref, std::fabs(expected[k]));
    max_diff = std::max(max_diff, std::fabs(got[k] - expected[k]));
  }
  CHECK(max_diff < 5e-2f * max_ref);  // the fast path's tolerance (bf16 activations)
  for (size_t r = 0; r < prompt.size(); ++r) {
    const auto row = [&](const std::vector<float>& v) {
      return v.begin() + static_cast<std::ptrdiff_t>(r * 1024);
    };
    CHECK(std::max_element(row(got), row(got) + 1024) - row(got) ==
          std::max_element(row(expected), row(expected) + 1024) - row(expected));
  }
}
