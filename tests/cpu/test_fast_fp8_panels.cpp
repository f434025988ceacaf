// tests/cpu/test_fast_fp8_panels.cpp
// FP8 weights in weight_layout::fp8_panels: the layout's offsets by hand, at() unchanged, and
// the fast GEMV / GEMM over panels against the same weight row-major, the reference and a
// by-hand sum.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "test_fast_util.hpp"

using namespace moe;

TEST_CASE("fp8_panel_offset: hand-placed bytes, and every element of a weight at its own byte") {
  // in = 128: a panel is 64 x 128 bytes; per column pair 128 bytes: rows 0-31 then 32-63, each
  // half as four 16-byte groups of rows 4g .. 4g + 3 (8 bytes) then rows 16 + 4g .. (8 bytes).
  CHECK(fp8_panel_offset(0, 0, 128) == 0);
  CHECK(fp8_panel_offset(0, 1, 128) == 1);  // the pair's second column
  CHECK(fp8_panel_offset(1, 0, 128) == 2);
  CHECK(fp8_panel_offset(3, 1, 128) == 7);
  CHECK(fp8_panel_offset(16, 0, 128) == 8);  // rows 16-19 after rows 0-3
  CHECK(fp8_panel_offset(4, 0, 128) == 16);  // next 16-byte group
  CHECK(fp8_panel_offset(31, 1, 128) == 3 * 16 + 8 + 3 * 2 + 1);
  CHECK(fp8_panel_offset(32, 0, 128) == 64);              // second half of the pair's 128 bytes
  CHECK(fp8_panel_offset(0, 2, 128) == 128);              // next column pair
  CHECK(fp8_panel_offset(63, 127, 128) == 64 * 128 - 1);  // last byte of panel 0
  CHECK(fp8_panel_offset(64, 0, 128) == 64 * 128);        // panel 1
  std::set<int64_t> seen;
  for (int64_t o = 0; o < 192; ++o)
    for (int64_t i = 0; i < 256; ++i)
      seen.insert(fp8_panel_offset(o, i, 256));
  CHECK(seen.size() == 192 * 256);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 192 * 256 - 1);
  CHECK(fp8_panels_fit(128, 64));
  CHECK_FALSE(fp8_panels_fit(160, 1024));  // kv_a_proj_with_mqa of the small preset
  CHECK_FALSE(fp8_panels_fit(256, 96));
}

TEST_CASE("fast: FP8 GEMV and GEMM over panels match the row-major weight and the reference") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast2(2), fast1(1);
  struct shape {
    int64_t out, in;
  };
  // One panel; two row blocks, 1024 wide; a partial 128-column block (320); 2816 (dense down);
  // 160 rows (kv_a of the small preset), in panels padded to 192 rows.
  for (shape s : {shape{64, 128}, shape{256, 1024}, shape{192, 320}, shape{128, 2816}, shape{160, 1024}}) {
    const auto rm = test::random_weight(dtype::f8_e4m3, s.out, s.in, 31u + static_cast<uint32_t>(s.in));
    std::unique_ptr<test::owned_weight> pn;
    std::shared_ptr<const uint8_t> padded;
    if (fp8_panels_fit(s.out, s.in)) {
      pn = test::to_fp8_panels(*rm);
    } else {
      padded = fast::pad_fp8_panels(rm->w);
      pn = std::make_unique<test::owned_weight>(test::owned_weight{.scales = rm->scales, .w = rm->w});
      pn->w.data = padded.get();
      pn->w.scale_inv = pn->scales.data();
      pn->w.layout = weight_layout::fp8_panels;
    }
    REQUIRE(fast::fast_supports(pn->w));
    for (int64_t o = 0; o < s.out; o += 7)
      for (int64_t i = 0; i < s.in; i += 5)
        REQUIRE(pn->w.at(o, i) == rm->w.at(o, i));
    for (int64_t tokens : {1, 2, 3, 4, 5, 8, 9, 40}) {
      CAPTURE(s.out);
      CAPTURE(s.in);
      CAPTURE(tokens);
      const auto x = test::random_floats(tokens * s.in, 3u + static_cast<uint32_t>(tokens));
      const auto want = test::run_linear(ref, rm->w, x, tokens);
      const auto rows = test::run_linear(fast2, rm->w, x, tokens);
      const auto panels = test::run_linear(fast2, pn->w, x, tokens);
      CHECK(test::max_rel_error(panels, want) < 1e-2);  // bf16 activations, as row-major
      // row-major FP8 takes the GEMM at any row count; panels the GEMV up to 8 rows: one sum order
      CHECK(test::same_bits(panels, rows));
      CHECK(test::same_bits(panels, test::run_linear(fast1, pn->w, x, tokens)));
    }
  }
}

TEST_CASE("fast: FP8 panels serve any row range, panel-aligned or not") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const int64_t out = 256, in = 512;
  const auto rm = test::random_weight(dtype::f8_e4m3, out, in, 77u);
  const auto pn = test::to_fp8_panels(*rm);
  fast::thread_scratch s;
  for (int64_t tokens : {1, 6, 12}) {
    const auto x = test::random_floats(tokens * in, 5u);
    std::vector<const float*> rows(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t)
      rows[t] = x.data() + t * in;
    const fast::act_rows a{.num_rows = tokens, .k = in, .f32 = rows.data()};
    struct range {
      int64_t r0, nr;
    };
    for (range r : {range{0, 256}, range{64, 64}, range{16, 96}, range{100, 30}, range{250, 6}}) {
      CAPTURE(tokens);
      CAPTURE(r.r0);
      CAPTURE(r.nr);
      // outputs land at [0, nr) of each token's row of width `out`; the rest stays -7
      std::vector<float> want(static_cast<size_t>(tokens * out), -7.0f), got(want);
      fast::linear_rows(a, rm->w, r.r0, r.nr, want.data(), out, s);
      fast::linear_rows(a, pn->w, r.r0, r.nr, got.data(), out, s);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t j = 0; j < out; ++j) {
          const float w = want[t * out + j], g = got[t * out + j];
          if (j >= r.nr)
            REQUIRE(g == -7.0f);
          else
            REQUIRE(g == w);  // one sum order in every kernel
        }
    }
  }
}

TEST_CASE("fast: batch-1 GEMV over FP8 panels equals a by-hand sum, subnormal weights read as zero") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const int64_t out = 128, in = 256;
  auto rm = test::random_weight(dtype::f8_e4m3, out, in, 9u);
  for (int64_t i = 0; i < in; ++i)  // row 0: subnormal codes only
    rm->bytes[i] = static_cast<uint8_t>(1 + i % 7) | static_cast<uint8_t>(i % 2 ? 0x80 : 0);
  const auto pn = test::to_fp8_panels(*rm);
  const auto x = test::random_floats(in, 21u, 3.0f);
  cpu_fast_backend fast(2);
  test::check_fp8_gemv_by_hand(*rm, test::run_linear(fast, pn->w, x, 1), x);
}

TEST_CASE(
  "fast: FP8 block sums are added to nearest with subnormal results flushed, in every kernel, whatever the caller's MXCSR") {
  // A row's scale blocks: its sums go in block by block (fast_linear.hpp fp8_block_sum) in the
  // GEMV (1 row), the vdpbf16ps tile (9 rows) and the FMA tile (20 rows) alike. Activations
  // ~2^-16 and row block 1's scales 2^-126 make that block's sums subnormal (~2^-132): every
  // kernel must flush them, as the FMA tiles' MXCSR does, and must round to nearest under a
  // round-down caller.
  MOE_SKIP_WITHOUT_FAST_PATH();
  const int64_t out = 256, in = 1024, rows = 20;
  auto rm = test::random_weight(dtype::f8_e4m3, out, in, 61u);
  const int64_t blocks_per_row = in / 128;
  for (int64_t b = 0; b < blocks_per_row; ++b)
    rm->scales[static_cast<size_t>(blocks_per_row + b)] = std::ldexp(1.0f, -126);
  const auto pn = test::to_fp8_panels(*rm);
  const std::vector<float> x = test::random_floats(rows * in, 63u, 1.0f / 65536.0f);
  fast::thread_scratch s;
  auto run = [&](int64_t first, int64_t n) {  // rows [first, first + n), this thread
    std::vector<const float*> ptrs;
    for (int64_t m = first; m < first + n; ++m)
      ptrs.push_back(x.data() + m * in);
    std::vector<float> y(static_cast<size_t>(n * out), -7.0f);
    fast::linear_rows({.num_rows = n, .k = in, .f32 = ptrs.data()}, pn->w, 0, out, y.data(), out, s);
    return y;
  };
  auto all_ways = [&] {  // FMA tile, then 9-row tiles, then GEMV
    std::vector<std::vector<float>> ways = {run(0, rows), run(0, 9), run(9, 9), run(18, 2)};
    std::vector<float> alone;
    for (int64_t m = 0; m < rows; ++m) {
      const std::vector<float> y = run(m, 1);
      alone.insert(alone.end(), y.begin(), y.end());
    }
    return std::pair{ways, alone};
  };
  const auto [ways, alone] = all_ways();
  const unsigned saved = _mm_getcsr();
  _mm_setcsr((saved & ~0x6000u) | 0x4000u);  // round down
  const auto [ways_down, alone_down] = all_ways();
  _mm_setcsr(saved);
  CHECK(_mm_getcsr() == saved);
  std::vector<float> nine(ways[1]);
  nine.insert(nine.end(), ways[2].begin(), ways[2].end());
  nine.insert(nine.end(), ways[3].begin(), ways[3].end());
  CHECK(test::same_bits(ways[0], alone));
  CHECK(test::same_bits(nine, alone));
  CHECK(test::same_bits(ways_down[0], alone));
  CHECK(test::same_bits(alone_down, alone));
  // row block 1 came out flushed: zeros, while row block 0 is not
  int64_t zeros = 0, nonzero = 0;
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t r = 0; r < 128; ++r) {
      zeros += alone[static_cast<size_t>(m * out + 128 + r)] == 0.0f;
      nonzero += alone[static_cast<size_t>(m * out + r)] != 0.0f;
    }
  CHECK(zeros == rows * 128);
  CHECK(nonzero == rows * 128);
}

TEST_CASE("fast: FP8 panels need block rows in whole panels, else the reference runs them") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  auto rm = test::random_weight(dtype::f8_e4m3, 128, 128, 4u);
  auto pn = test::to_fp8_panels(*rm);
  CHECK(fast::fast_supports(pn->w));
  pn->w.block_rows = 96;
  CHECK_FALSE(fast::fast_supports(pn->w));
  rm->w.layout = weight_layout::fp8_panels;  // columns that do not fill a step
  rm->w.in_features = 96;
  CHECK_FALSE(fast::fast_supports(rm->w));
  rm->w.in_features = 128;  // rows need not fill panels (padded)
  rm->w.out_features = 96;
  CHECK(fast::fast_supports(rm->w));
}

TEST_CASE("fast: plan_gemv cuts weights in FP8 panels at whole panels") {
  // q_a [384, 1024] in panels beside kv_a [160, 1024] BF16 (the small preset's pair): 544 rows,
  // 4 tasks of 136 rows on 4 threads if cut at 16 rows, inside q_a's panels 2 and 4
  auto q_a = test::to_fp8_panels(*test::random_weight(dtype::f8_e4m3, 384, 1024, 1u));
  auto kv_a = test::random_weight(dtype::bf16, 160, 1024, 2u);
  const linear_weight* ws[] = {&q_a->w, &kv_a->w};
  const std::vector<gemv_piece> pieces = plan_gemv(ws, 4);
  const int64_t rows[] = {384, 160};
  for (const gemv_piece& p : pieces) {  // each weight cut at its own panels
    CAPTURE(p.weight);
    CAPTURE(p.r0);
    CHECK(p.r0 % fp8_panel_rows == 0);
    CHECK(((p.r0 + p.num_rows) % fp8_panel_rows == 0 || p.r0 + p.num_rows == rows[p.weight]));
  }
  int64_t covered = 0;
  for (const gemv_piece& p : pieces)
    covered += p.num_rows;
  CHECK(covered == 384 + 160);
}
