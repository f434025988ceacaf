// tests/cpu/test_fast_experts.cpp
// The fast backend's grouped routed experts against the reference, and bit-identical results
// for any thread count.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

struct experts_case {
  std::vector<std::unique_ptr<test::owned_weight>> owned;
  std::vector<mlp_weights> experts;
  std::vector<float> x, topk_weights;
  std::vector<int32_t> topk_ids;
  int64_t tokens = 0, hidden = 0, top_k = 0;
};

// E experts [inter, hidden] / [hidden, inter]; each token routes to top_k distinct experts.
experts_case make_case(dtype type, int64_t num_experts, int64_t hidden, int64_t inter, int64_t tokens,
                       int64_t top_k, uint32_t seed) {
  experts_case c;
  c.tokens = tokens, c.hidden = hidden, c.top_k = top_k;
  for (int64_t e = 0; e < num_experts; ++e) {
    auto add = [&](int64_t out, int64_t in, uint32_t s) {
      c.owned.push_back(test::random_weight(type, out, in, s));
      return c.owned.back()->w;
    };
    const auto e32 = static_cast<uint32_t>(e);
    c.experts.push_back({.gate_proj = add(inter, hidden, seed + 3 * e32),
                         .up_proj = add(inter, hidden, seed + 3 * e32 + 1),
                         .down_proj = add(hidden, inter, seed + 3 * e32 + 2)});
  }
  c.x = test::random_floats(tokens * hidden, seed + 1000);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  std::vector<int32_t> ids(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int64_t k = 0; k < top_k; ++k) {
      c.topk_ids.push_back(ids[k]);
      c.topk_weights.push_back(weight(rng));
    }
  }
  return c;
}

std::vector<float> run(backend& b, const experts_case& c, int64_t begin, int64_t end) {
  std::vector<float> out(static_cast<size_t>(c.tokens * c.hidden), -7.0f);
  b.moe_experts({.x = c.x.data(),
                 .topk_ids = c.topk_ids.data(),
                 .topk_weights = c.topk_weights.data(),
                 .out = out.data(),
                 .num_tokens = c.tokens,
                 .hidden = c.hidden,
                 .top_k = c.top_k,
                 .experts = &c.experts,
                 .expert_begin = begin,
                 .expert_end = end});
  return out;
}

}  // namespace

TEST_CASE("fast: moe_experts matches the reference and is identical for any thread count") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast2(2), fast3(3);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3, dtype::f32}) {
    // hidden 320, inter 200: partial 128-blocks and a partial 32-column chunk in the down proj.
    for (int64_t tokens : {1, 3, 17, 64, 200}) {
      const experts_case c = make_case(type, 16, 320, 200, tokens, 4, 5u + static_cast<uint32_t>(tokens));
      for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 16}, {4, 12}}) {
        CAPTURE(dtype_name(type));
        CAPTURE(tokens);
        CAPTURE(begin);
        const auto want = run(ref, c, begin, end);
        const auto got = run(fast2, c, begin, end);
        const bool rounded = type != dtype::f32;
        // Two chained matmuls with bf16 inputs (x, then h): rms error ~1.5 * 2^-9 of the output
        // RMS (measured 0.003), the worst element up to ~10x that; fp32 for F32 weights.
        CHECK(test::rms_rel_error(got, want) < (rounded ? 1e-2 : 1e-6));
        CHECK(test::max_rel_error(got, want) < (rounded ? 5e-2 : 1e-5));
        for (backend* other : {static_cast<backend*>(&fast1), static_cast<backend*>(&fast3)}) {
          const auto again = run(*other, c, begin, end);
          CHECK(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("fast: moe_experts gives a token the same bits alone or among 200") {
  // An expert's row count depends on how a topology batches tokens (ranks, micro-batches), and
  // from fast::fma_min_rows rows its GEMMs run on the FMA tiles, alone on the vdpbf16ps ones.
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_fast_backend fast(2);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3}) {
    CAPTURE(dtype_name(type));
    const experts_case c = make_case(type, 8, 320, 200, 200, 4, 77u);  // ~100 rows an expert
    const auto together = run(fast, c, 0, 8);
    for (int64_t t = 0; t < c.tokens; t += 37) {
      CAPTURE(t);
      experts_case one;  // token t alone, the same weights
      one.tokens = 1, one.hidden = c.hidden, one.top_k = c.top_k;
      one.experts = c.experts;
      one.x.assign(c.x.begin() + t * c.hidden, c.x.begin() + (t + 1) * c.hidden);
      one.topk_ids.assign(c.topk_ids.begin() + t * c.top_k, c.topk_ids.begin() + (t + 1) * c.top_k);
      one.topk_weights.assign(c.topk_weights.begin() + t * c.top_k,
                              c.topk_weights.begin() + (t + 1) * c.top_k);
      const auto alone = run(fast, one, 0, 8);
      CHECK(std::memcmp(alone.data(), together.data() + t * c.hidden, c.hidden * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("fast: an expert range no token routes into gives zeros, as the reference") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  experts_case c = make_case(dtype::bf16, 8, 64, 64, 5, 2, 11u);
  for (int32_t& id : c.topk_ids)
    id %= 4;  // every token picks among experts 0-3
  cpu_reference_backend ref;
  for (int threads : {1, 2, 3}) {
    cpu_fast_backend fast(threads);
    CAPTURE(threads);
    CHECK(run(fast, c, 4, 8) == std::vector<float>(5 * 64, 0.0f));  // divided by 0 experts
    CHECK(run(fast, c, 4, 8) == run(ref, c, 4, 8));
  }
}

TEST_CASE("fast: group_by_expert is a stable counting sort that skips experts out of range") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  // 3 tokens, top 2; experts 0..3 in range [1, 4): expert 0 skipped.
  const std::vector<int32_t> ids = {2, 0, 1, 2, 3, 2};
  const std::vector<float> weights(ids.size(), 1.0f);
  const moe_experts_params p{.topk_ids = ids.data(),
                             .topk_weights = weights.data(),
                             .num_tokens = 3,
                             .top_k = 2,
                             .expert_begin = 1,
                             .expert_end = 4};
  expert_grouping g;
  group_by_expert(p, g);
  CHECK(g.offsets == std::vector<int64_t>{0, 1, 4, 5});      // experts 1, 2, 3
  CHECK(g.pos_slot == std::vector<int64_t>{2, 0, 3, 5, 4});  // slots in order per expert
  CHECK(g.slot_pos == std::vector<int64_t>{1, -1, 0, 2, 4, 3});
  CHECK(g.active == std::vector<int64_t>{1, 0, 2});  // expert 2 (index 1) busiest
}
