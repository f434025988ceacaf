// tests/model/test_ep_precision.cpp
// A single rank with FP8 dispatch and BF16 combine computes exactly what expert parallelism
// would: each (token, k) pair's expert run alone on the FP8-rounded input, its weighted output
// rounded to BF16, the pairs summed in k order.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/model/forward_step.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

TEST_CASE("routed experts with FP8 dispatch and BF16 combine equal the per-pair emulation") {
  const model_weights w = testing::tiny_model_builder(21).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  kv_cache cache(w.config.num_hidden_layers, 8, 4, w.config.kv_cache_dim());
  const rope_tables rope = make_rope_tables(w.config);
  const std::vector<int32_t> prompt = {0, 4, 8, 15, 16, 23, 42};
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size())));
  const batch_entry entry{.tokens = prompt, .kv = &kv};
  forward_step step(w, *ref, cache, rope, std::span(&entry, 1));
  const int64_t moe_layer = w.config.first_k_dense_replace, T = step.num_tokens();
  const int64_t D = w.config.hidden_size, K = w.config.num_experts_per_tok;
  REQUIRE(w.layers[moe_layer].is_moe);
  for (int64_t l = 0; l <= moe_layer; ++l) {
    step.attn_0(l);
    step.attn_1(l, attention_forms::all(attention_form::absorbed));
    if (l < moe_layer) {
      step.shared(l);
      step.combine(l);
    }
  }
  step.routed_local(moe_layer, {});
  const std::vector<float> exact(step.routed_output().begin(), step.routed_output().end());
  step.routed_local(moe_layer, {.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16});
  const std::vector<float> ep(step.routed_output().begin(), step.routed_output().end());

  // the emulation: one (token, k) pair at a time
  std::vector<float> x(step.moe_input().begin(), step.moe_input().end());
  round_trip_rows(x.data(), T, D, payload_dtype::fp8);
  std::vector<float> expected(static_cast<size_t>(T * D), 0.0f), y(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = step.topk_ids()[t * K + k];
      const float wk = step.topk_weights()[t * K + k];
      ref->moe_experts({.x = x.data() + t * D,
                        .topk_ids = &e,
                        .topk_weights = &wk,
                        .out = y.data(),
                        .num_tokens = 1,
                        .hidden = D,
                        .top_k = 1,
                        .experts = &w.layers[moe_layer].moe.experts,
                        .expert_begin = 0,
                        .expert_end = w.config.n_routed_experts,
                        .round_outputs_bf16 = true});
      for (int64_t i = 0; i < D; ++i)
        expected[t * D + i] += y[i];  // y is already BF16-exact
    }
  CHECK(ep == expected);        // bit for bit
  double num = 0.0, den = 0.0;  // and close to the exact path
  for (size_t i = 0; i < ep.size(); ++i) {
    num += (ep[i] - exact[i]) * (ep[i] - exact[i]);
    den += exact[i] * exact[i];
  }
  CHECK(num > 0.0);  // the payload types do round
  CHECK(std::sqrt(num / den) < 0.05);
  kv.release(cache);
}
