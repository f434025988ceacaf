// tests/model/test_expert_parallel.cpp
// Dispatch -> experts on their ranks -> combine equals routed_local bit for bit on the reference
// backend, for any group size, placement (redundant replicas included), payload types, split of
// tokens between source ranks and order in which dispatches arrive.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/model/expert_parallel.hpp"
#include "kernels/model/forward_step.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

struct moe_layer_inputs {
  int64_t layer_idx = 0, num_tokens = 0;
  std::vector<float> x, weights;
  std::vector<int32_t> ids;
  std::vector<float> exact_fp8_bf16, exact_bf16_bf16, exact_fp32;   // routed_local outputs
};

// Runs a prompt up to the first MoE layer's router and records routed_local's answers.
moe_layer_inputs capture(const model_weights& w, backend& ref) {
  kv_cache cache(w.config.num_hidden_layers, 8, 4, w.config.kv_cache_dim());
  const rope_tables rope = make_rope_tables(w.config);
  const std::vector<int32_t> prompt = {0, 4, 8, 15, 16, 23, 42, 7, 3};
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size())));
  const batch_entry entry{.tokens = prompt, .kv = &kv};
  forward_step step(w, ref, cache, rope, std::span(&entry, 1));
  moe_layer_inputs in{.layer_idx = w.config.first_k_dense_replace, .num_tokens = step.num_tokens()};
  for (int64_t l = 0; l <= in.layer_idx; ++l) {
    step.attn_0(l);
    step.attn_1(l, attention_form::absorbed);
    if (l < in.layer_idx) {
      step.shared(l);
      step.combine(l);
    }
  }
  in.x.assign(step.moe_input().begin(), step.moe_input().end());
  in.ids.assign(step.topk_ids().begin(), step.topk_ids().end());
  in.weights.assign(step.topk_weights().begin(), step.topk_weights().end());
  auto routed = [&](ep_precision ep) {
    step.routed_local(in.layer_idx, ep);
    return std::vector<float>(step.routed_output().begin(), step.routed_output().end());
  };
  in.exact_fp8_bf16 = routed({.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16});
  in.exact_bf16_bf16 = routed({.dispatch = payload_dtype::bf16, .combine = payload_dtype::bf16});
  in.exact_fp32 = routed({});
  kv.release(cache);
  return in;
}

// The whole exchange with `sources` source ranks splitting the tokens, in a shuffled order.
std::vector<float> run_group(const model_weights& w, backend& ref, const moe_layer_inputs& in,
                             const layer_placement& placement, ep_precision ep, std::mt19937& rng) {
  const int64_t D = w.config.hidden_size, K = w.config.num_experts_per_tok, R = placement.num_ranks;
  const int64_t T = in.num_tokens, split = T / 2 + 1;
  const int64_t token_begin[2] = {0, split}, token_end[2] = {split, T};
  std::vector<dispatch_plan> plans(2);
  std::vector<std::vector<std::shared_ptr<const ep_dispatch>>> inbox(static_cast<size_t>(R));
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t t0 = token_begin[s], n = token_end[s] - t0;
    auto out = make_dispatches(placement, {.step = 3, .layer_idx = in.layer_idx, .micro_batch = 0}, s,
                               std::span(in.x).subspan(t0 * D, n * D), std::span(in.ids).subspan(t0 * K, n * K),
                               std::span(in.weights).subspan(t0 * K, n * K), n, D, K, ep, plans[s]);
    REQUIRE(static_cast<int64_t>(out.size()) == R);
    for (int64_t r = 0; r < R; ++r)
      inbox[r].push_back(out[r]);
  }
  // each rank answers what it got, in a random arrival order
  std::vector<std::vector<std::shared_ptr<const ep_combine>>> answers(2, std::vector<std::shared_ptr<const ep_combine>>(R));
  for (int64_t r = 0; r < R; ++r) {
    std::shuffle(inbox[r].begin(), inbox[r].end(), rng);
    auto combined = run_dispatched_experts(ref, w.layers[in.layer_idx].moe, placement, r, inbox[r], D);
    for (size_t i = 0; i < combined.size(); ++i) {
      CHECK(combined[i]->key == inbox[r][i]->key);
      answers[inbox[r][i]->src_rank][r] = combined[i];       // source s is rank s
    }
  }
  std::vector<float> out(static_cast<size_t>(T * D), -1.0f);
  for (int64_t s = 0; s < 2; ++s)
    combine_outputs(plans[s], answers[s], out.data() + token_begin[s] * D, D);
  return out;
}

}  // namespace

TEST_CASE("expert-parallel dispatch and combine equal routed_local bit for bit") {
  const model_weights w = testing::tiny_model_builder(33).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  const moe_layer_inputs in = capture(w, *ref);
  const int64_t E = w.config.n_routed_experts;
  std::mt19937 rng(7);
  for (const int64_t num_ranks : {2, 4}) {      // two source ranks: ranks 0 and 1
    for (const int64_t redundant : {int64_t{0}, num_ranks}) {
      CAPTURE(num_ranks);
      CAPTURE(redundant);
      if ((E + redundant) % num_ranks != 0)
        continue;
      layer_placement placement = default_layer_placement(E, redundant, num_ranks);
      std::vector<int32_t> shuffled = placement.slot_expert;   // and a scrambled placement
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (const layer_placement& p : {placement, make_layer_placement(shuffled, num_ranks, E)}) {
        CHECK(run_group(w, *ref, in, p, {.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16}, rng) ==
              in.exact_fp8_bf16);
        CHECK(run_group(w, *ref, in, p, {.dispatch = payload_dtype::bf16, .combine = payload_dtype::bf16}, rng) ==
              in.exact_bf16_bf16);
        CHECK(run_group(w, *ref, in, p, {}, rng) == in.exact_fp32);
      }
    }
  }
  CHECK(in.exact_fp8_bf16 != in.exact_fp32);                 // the payload types matter
}

TEST_CASE("dispatch sends each token once per rank and spreads replicas") {
  // 4 experts on 2 ranks plus 2 replicas of experts 0 and 1: slots [0 1 2 | 3 0 1]
  const layer_placement p = default_layer_placement(4, 2, 2);
  CHECK(p.slot_expert == std::vector<int32_t>{0, 1, 2, 3, 0, 1});
  CHECK(p.expert_slots[0] == std::vector<int32_t>{0, 4});
  const int64_t D = 2, K = 2, T = 2;
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<int32_t> ids = {0, 2,    // token 0: expert 0 -> replica (0 + src 0) % 2 = slot 0 (rank 0); 2 -> rank 0
                                    0, 3};   // token 1: expert 0 -> slot 4 (rank 1); 3 -> rank 1
  const std::vector<float> wts = {0.5f, 0.25f, 1.0f, 2.0f};
  dispatch_plan plan;
  auto d = make_dispatches(p, {}, 0, x, ids, wts, T, D, K, {}, plan);
  REQUIRE(d.size() == 2);
  CHECK(d[0]->rows.num_rows == 1);                           // token 0 once, for two pairs
  CHECK(d[0]->pair_row == std::vector<int32_t>{0, 0});
  CHECK(d[0]->pair_expert == std::vector<int32_t>{0, 2});
  CHECK(d[1]->rows.num_rows == 1);
  CHECK(d[1]->pair_expert == std::vector<int32_t>{0, 3});
  CHECK(d[1]->pair_weight == std::vector<float>{1.0f, 2.0f});
  CHECK(plan.pair_dest == std::vector<int32_t>{0, 0, 1, 1});
  CHECK(plan.pair_index == std::vector<int32_t>{0, 1, 0, 1});
  // the same tokens from source rank 1 pick the other replica of expert 0 for token 0
  auto d1 = make_dispatches(p, {}, 1, x, ids, wts, T, D, K, {}, plan);
  CHECK(plan.pair_dest == std::vector<int32_t>{1, 0, 0, 1});
}

TEST_CASE("a dispatch to a rank that lacks the expert, and bad placements, are refused") {
  const model_weights w = testing::tiny_model_builder(3).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  const int64_t E = w.config.n_routed_experts, D = w.config.hidden_size;
  const layer_placement p = default_layer_placement(E, 0, 2);
  std::vector<float> x(static_cast<size_t>(D), 0.5f);
  const std::vector<int32_t> ids = {0};                      // expert 0 lives on rank 0
  const std::vector<float> wts = {1.0f};
  dispatch_plan plan;
  auto d = make_dispatches(p, {}, 0, x, ids, wts, 1, D, 1, {}, plan);
  const std::vector<std::shared_ptr<const ep_dispatch>> wrong = {d[0]};
  CHECK_THROWS_AS((void)run_dispatched_experts(*ref, w.layers[w.config.first_k_dense_replace].moe, p, 1, wrong, D),
                  std::logic_error);
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 2}, 2, 3), std::invalid_argument);     // 3 slots, 2 ranks
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 1, 0}, 2, 3), std::invalid_argument);  // expert 2 missing
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 5, 2}, 2, 3), std::invalid_argument);  // no expert 5
  CHECK_THROWS_AS((void)make_dispatches(p, {}, 0, x, ids, wts, 1, D, 1,
                                        {.dispatch = payload_dtype::fp8, .combine = payload_dtype::fp8}, plan),
                  std::invalid_argument);
}
