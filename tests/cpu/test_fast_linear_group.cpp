// tests/cpu/test_fast_linear_group.cpp
// linear_group: the fast backend's one-pass GEMV over several weights gives exactly what one
// linear per weight gives (and the reference's default does), its task plan cuts the rows into
// equal tasks by hand-computed cuts, and bad groups are refused.
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

struct group_case {
  std::vector<std::unique_ptr<test::owned_weight>> weights;
  std::vector<const linear_weight*> w;
};

group_case make_group(dtype type, std::initializer_list<int64_t> rows, int64_t in, uint32_t seed) {
  group_case g;
  for (const int64_t r : rows) {
    g.weights.push_back(test::random_weight(type, r, in, seed++));
    g.w.push_back(&g.weights.back()->w);
  }
  return g;
}

// out[i] of linear_group(x) on `b`, each buffer pre-filled so a row left unwritten shows.
std::vector<std::vector<float>> run_group(backend& b, const group_case& g, const std::vector<float>& x,
                                          int64_t tokens) {
  std::vector<std::vector<float>> out;
  std::vector<float*> ptrs;
  for (const linear_weight* w : g.w)
    out.emplace_back(static_cast<size_t>(tokens * w->out_features), -7.0f);
  for (auto& o : out)
    ptrs.push_back(o.data());
  b.linear_group({.x = x.data(), .w = g.w, .out = ptrs, .num_tokens = tokens});
  return out;
}

}  // namespace

TEST_CASE("fast: linear_group equals one linear per weight, bit for bit, on any thread count") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast2(2), fast3(3);
  for (dtype type : {dtype::f8_e4m3, dtype::bf16, dtype::f32}) {
    // q_a + kv_a of the small preset (a task crosses from one weight into the next); gate + up;
    // odd sizes with partial 128-blocks; three weights, one of them shorter than a task.
    struct shape {
      std::initializer_list<int64_t> rows;
      int64_t in;
    };
    for (const shape& s : {shape{{384, 160}, 1024}, shape{{256, 256}, 1024}, shape{{70, 129}, 320},
                           shape{{200, 16, 300}, 160}}) {
      const group_case g = make_group(type, s.rows, s.in, 31u);
      // 1-8 rows: the one-pass GEMV; 17: GEMM shapes, one dispatch per weight
      for (int64_t tokens : {1, 3, 8, 17}) {
        CAPTURE(dtype_name(type));
        CAPTURE(s.in);
        CAPTURE(tokens);
        const auto x = test::random_floats(tokens * s.in, 5u + static_cast<uint32_t>(tokens));
        const auto want_ref = run_group(ref, g, x, tokens);
        for (cpu_fast_backend* fast : {&fast1, &fast2, &fast3}) {
          CAPTURE(fast->num_threads());
          const auto got = run_group(*fast, g, x, tokens);
          for (size_t i = 0; i < g.w.size(); ++i) {
            CAPTURE(i);
            CHECK(test::same_bits(got[i], test::run_linear(*fast, *g.w[i], x, tokens)));
            CHECK(test::same_bits(want_ref[i], test::run_linear(ref, *g.w[i], x, tokens)));
            // bf16 activations (precision per element: test_fast_linear); here the whole output
            const bool rounded = type != dtype::f32;
            CHECK(test::rms_rel_error(got[i], want_ref[i]) < (rounded ? 5e-3 : 1e-6));
          }
        }
      }
    }
  }
}

TEST_CASE("fast: plan_gemv cuts the weights' rows into equal tasks of whole panels (16 rows for f32)") {
  MOE_SKIP_WITHOUT_FAST_PATH();  // its file is built for AVX-512
  auto fp8 = [](int64_t out, int64_t in) {
    return linear_weight{.type = dtype::f8_e4m3, .out_features = out, .in_features = in};
  };
  using piece = gemv_piece;
  auto same = [](const std::vector<gemv_piece>& got, const std::vector<gemv_piece>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].task == want[i].task);
      CHECK(got[i].weight == want[i].weight);
      CHECK(got[i].r0 == want[i].r0);
      CHECK(got[i].num_rows == want[i].num_rows);
    }
  };
  SUBCASE("q_a + kv_a, 2 threads: 544 KiB, 9 panels -> 2 tasks of 5 and 4 panels") {
    // q_a's 6 panels then kv_a's 3 (the last half full): q_a 0-319, then q_a 320-383 with kv_a
    const linear_weight q_a = fp8(384, 1024), kv_a = fp8(160, 1024);
    const linear_weight* w[] = {&q_a, &kv_a};
    same(plan_gemv(w, 2), {piece{0, 0, 0, 320}, piece{1, 0, 320, 64}, piece{1, 1, 0, 160}});
  }
  SUBCASE("an expert's gate (256 KiB), 2 threads: 2 x 128 rows") {
    const linear_weight gate = fp8(256, 1024);
    const linear_weight* w[] = {&gate};
    same(plan_gemv(w, 2), {piece{0, 0, 0, 128}, piece{1, 0, 128, 128}});
    same(plan_gemv(w, 4),
         {piece{0, 0, 0, 64}, piece{1, 0, 64, 64}, piece{2, 0, 128, 64}, piece{3, 0, 192, 64}});
  }
  SUBCASE("a task crosses into the next weight at that weight's own first panel") {
    // a's 96 rows are 2 panels (the second short); 5 panels on 2 threads as 2 tasks: 3 + 2
    const linear_weight a = fp8(96, 1024), b = fp8(160, 1024);
    const linear_weight* w[] = {&a, &b};
    same(plan_gemv(w, 2), {piece{0, 0, 0, 96}, piece{0, 1, 0, 64}, piece{1, 1, 64, 96}});
    same(plan_gemv(w, 1), {piece{0, 0, 0, 96}, piece{0, 1, 0, 160}});
  }
  SUBCASE("f32 weights: 16-row multiples; 320 KiB on 3 threads gives 3 tasks, not 5 of 64 KiB") {
    const linear_weight w0{.type = dtype::f32, .out_features = 80, .in_features = 1024};
    const linear_weight* w[] = {&w0};
    same(plan_gemv(w, 3), {piece{0, 0, 0, 32}, piece{1, 0, 32, 32}, piece{2, 0, 64, 16}});
  }
  SUBCASE("no rows: no tasks") {
    const linear_weight empty = fp8(0, 1024);
    const linear_weight* w[] = {&empty};
    CHECK(plan_gemv(w, 2).empty());
  }
  SUBCASE("under 64 KiB: one task") {
    const linear_weight small = fp8(60, 1024);
    const linear_weight* w[] = {&small};
    same(plan_gemv(w, 2), {piece{0, 0, 0, 60}});
  }
}

TEST_CASE("linear_group refuses weights of different input widths and a missing output") {
  cpu_reference_backend ref;
  std::vector<std::unique_ptr<backend>> backends;
  backends.push_back(make_cpu_reference_backend());
  if (cpu_fast_path_supported())
    backends.push_back(make_cpu_fast_backend(2));
  const auto a = test::random_weight(dtype::bf16, 32, 64, 1u),
             b = test::random_weight(dtype::bf16, 32, 96, 2u);
  std::vector<float> x(96, 1.0f), o0(32), o1(32);
  const linear_weight* mixed[] = {&a->w, &b->w};
  float* two[] = {o0.data(), o1.data()};
  float* one[] = {o0.data()};
  for (auto& dev : backends) {
    CAPTURE(dev->name());
    CHECK_THROWS_WITH_AS(dev->linear_group({.x = x.data(), .w = mixed, .out = two, .num_tokens = 1}),
                         "linear_group: weights of 64 and 96 inputs read one x", std::invalid_argument);
    const linear_weight* same[] = {&a->w, &a->w};
    CHECK_THROWS_WITH_AS(dev->linear_group({.x = x.data(), .w = same, .out = one, .num_tokens = 1}),
                         "linear_group: 2 weights but 1 outputs", std::invalid_argument);
  }
}
