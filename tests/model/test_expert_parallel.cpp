// tests/model/test_expert_parallel.cpp
// Dispatch -> experts on their ranks -> combine equals routed_local bit for bit on the reference
// backend, for any group size, placement (redundant replicas included), payload types, split of
// tokens between source ranks and order in which dispatches arrive. The reduced (per-rank)
// combine equals an independent per-(token, rank) sum of the same expert outputs.
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
  std::vector<float> exact_fp8_bf16, exact_bf16_bf16, exact_fp32;  // routed_local outputs
};

// The experts rank `rank` holds of layer `layer_idx` under `placement`, copied from the weights.
held_layer held_of(const model_weights& w, int64_t layer_idx, const layer_placement& placement,
                   int64_t rank) {
  std::vector<layer_placement> placements(w.layers.size());
  placements[static_cast<size_t>(layer_idx)] = placement;
  return hold_experts_from(w, placements, rank)->layers[static_cast<size_t>(layer_idx)];
}

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
    step.attn_1(l, attention_forms::all(attention_form::absorbed));
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
                               std::span(in.x).subspan(t0 * D, n * D),
                               std::span(in.ids).subspan(t0 * K, n * K),
                               std::span(in.weights).subspan(t0 * K, n * K), n, D, K, ep, plans[s]);
    REQUIRE(static_cast<int64_t>(out.size()) == R);
    for (int64_t r = 0; r < R; ++r)
      inbox[r].push_back(out[r]);
  }
  // each rank answers what it got, in a random arrival order
  std::vector<std::vector<std::shared_ptr<const ep_combine>>> answers(
    2, std::vector<std::shared_ptr<const ep_combine>>(R));
  for (int64_t r = 0; r < R; ++r) {
    std::shuffle(inbox[r].begin(), inbox[r].end(), rng);
    auto combined = run_dispatched_experts(ref, held_of(w, in.layer_idx, placement, r), r, inbox[r], D);
    for (size_t i = 0; i < combined.size(); ++i) {
      CHECK(combined[i]->key == inbox[r][i]->key);
      answers[inbox[r][i]->src_rank][r] = combined[i];  // source s is rank s
    }
  }
  std::vector<float> out(static_cast<size_t>(T * D), -1.0f);
  for (int64_t s = 0; s < 2; ++s)
    combine_outputs(plans[s], answers[s], out.data() + token_begin[s] * D, D);
  return out;
}

// What the reduced combine must give, computed without expert_parallel.cpp: every (t, k) pair's
// weighted expert output on its own, then per token a sum per destination rank in k order (rounded
// to the combine type unless that rank is the token's source), then those sums in rank order.
std::vector<float> reference_reduced(const model_weights& w, backend& ref, const moe_layer_inputs& in,
                                     const layer_placement& placement, ep_precision ep) {
  const int64_t D = w.config.hidden_size, K = w.config.num_experts_per_tok, T = in.num_tokens;
  const int64_t split = T / 2 + 1;  // run_group's two source ranks
  std::vector<float> xq = in.x, out(static_cast<size_t>(T * D), 0.0f), part(static_cast<size_t>(D));
  round_trip_rows(xq.data(), T, D, ep.dispatch);
  const moe_weights& moe = w.layers[in.layer_idx].moe;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t src = t < split ? 0 : 1;
    for (int64_t r = 0; r < placement.num_ranks; ++r) {
      std::fill(part.begin(), part.end(), 0.0f);
      bool any = false;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = in.ids[t * K + k];
        const auto& slots = placement.expert_slots[e];
        if (placement.rank_of_slot(slots[static_cast<size_t>((t - (src ? split : 0) + src) %
                                                             static_cast<int64_t>(slots.size()))]) != r)
          continue;
        std::vector<float> y(static_cast<size_t>(D));
        ref.moe_experts({.x = xq.data() + t * D,
                         .topk_ids = &e,
                         .topk_weights = &in.weights[t * K + k],
                         .out = y.data(),
                         .num_tokens = 1,
                         .hidden = D,
                         .top_k = 1,
                         .experts = &moe.experts,
                         .expert_begin = 0,
                         .expert_end = static_cast<int64_t>(moe.experts.size()),
                         .round_outputs_bf16 = ep.combine == payload_dtype::bf16});
        for (int64_t i = 0; i < D; ++i)
          part[i] += y[i];
        any = true;
      }
      if (!any)
        continue;
      if (r != src)
        round_trip_rows(part.data(), 1, D, ep.combine);
      for (int64_t i = 0; i < D; ++i)
        out[t * D + i] += part[i];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("expert-parallel dispatch and combine equal routed_local bit for bit") {
  const model_weights w = testing::tiny_model_builder(33).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  const moe_layer_inputs in = capture(w, *ref);
  const int64_t E = w.config.n_routed_experts;
  std::mt19937 rng(7);
  for (const int64_t num_ranks : {2, 4}) {  // two source ranks: ranks 0 and 1
    for (const int64_t redundant : {int64_t{0}, num_ranks}) {
      CAPTURE(num_ranks);
      CAPTURE(redundant);
      if ((E + redundant) % num_ranks != 0)
        continue;
      layer_placement placement = default_layer_placement(E, redundant, num_ranks);
      std::vector<int32_t> shuffled = placement.slot_expert;  // and a scrambled placement
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (const layer_placement& p : {placement, make_layer_placement(shuffled, num_ranks, E)}) {
        CHECK(run_group(w, *ref, in, p, {.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16},
                        rng) == in.exact_fp8_bf16);
        CHECK(run_group(w, *ref, in, p, {.dispatch = payload_dtype::bf16, .combine = payload_dtype::bf16},
                        rng) == in.exact_bf16_bf16);
        CHECK(run_group(w, *ref, in, p, {}, rng) == in.exact_fp32);
      }
    }
  }
  CHECK(in.exact_fp8_bf16 != in.exact_fp32);  // the payload types matter
}

TEST_CASE("the reduced combine: per-(token, rank) sums in rank order, whatever the arrival order") {
  const model_weights w = testing::tiny_model_builder(33).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  const moe_layer_inputs in = capture(w, *ref);
  const int64_t E = w.config.n_routed_experts, D = w.config.hidden_size, K = w.config.num_experts_per_tok;
  std::mt19937 rng(11);
  const ep_precision fp8 = {
    .dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16, .sum = combine_sum::per_rank};
  const ep_precision fp32 = {.sum = combine_sum::per_rank};
  // one rank: nothing crosses a link, so nothing is rounded again: routed_local bit for bit
  for (const auto& [ep, want] : {std::pair{fp8, &in.exact_fp8_bf16}, std::pair{fp32, &in.exact_fp32}}) {
    const layer_placement one = default_layer_placement(E, 0, 1);
    dispatch_plan plan;
    auto d = make_dispatches(one, {}, 0, in.x, in.ids, in.weights, in.num_tokens, D, K, ep, plan);
    const std::vector<std::shared_ptr<const ep_dispatch>> got(d.begin(), d.end());
    const auto answers = run_dispatched_experts(*ref, held_of(w, in.layer_idx, one, 0), 0, got, D);
    CHECK(answers[0]->outputs.num_rows == in.num_tokens);  // one row per token, not per pair
    std::vector<float> out(static_cast<size_t>(in.num_tokens * D));
    const std::vector<std::shared_ptr<const ep_combine>> back(answers.begin(), answers.end());
    combine_outputs(plan, back, out.data(), D);
    CHECK(out == *want);
  }
  for (const int64_t num_ranks : {2, 4}) {
    CAPTURE(num_ranks);
    layer_placement placement = default_layer_placement(E, num_ranks, num_ranks);
    std::vector<int32_t> shuffled = placement.slot_expert;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (const layer_placement& p : {placement, make_layer_placement(shuffled, num_ranks, E)}) {
      const std::vector<float> want = reference_reduced(w, *ref, in, p, fp8);
      CHECK(run_group(w, *ref, in, p, fp8, rng) == want);
      CHECK(run_group(w, *ref, in, p, fp8, rng) == want);  // another arrival order, same bits
      CHECK(run_group(w, *ref, in, p, fp32, rng) == reference_reduced(w, *ref, in, p, fp32));
      // one more bf16 rounding per remote rank: near the exact combine, not equal to it
      const std::vector<float> got = run_group(w, *ref, in, p, fp8, rng);
      double max_err = 0.0, max_abs = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        max_err = std::max(max_err, static_cast<double>(std::abs(got[i] - in.exact_fp8_bf16[i])));
        max_abs = std::max(max_abs, static_cast<double>(std::abs(in.exact_fp8_bf16[i])));
      }
      CHECK(max_err <= max_abs * K / 128.0);  // K values, each off by <= 2^-8 relative
    }
  }
}

TEST_CASE("the reduced combine by hand: rank order, own rank unrounded") {
  // 4 experts, 2 per rank; token 0 -> experts 3, 0 (ranks 1, 0); token 1 -> experts 1, 0 (rank 0 twice)
  const layer_placement p = default_layer_placement(4, 0, 2);
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<int32_t> ids = {3, 0, 1, 0};
  const std::vector<float> wts = {0.5f, 0.5f, 0.5f, 0.5f};
  dispatch_plan plan;
  auto d = make_dispatches(
    p, {}, 0, x, ids, wts, 2, 2, 2,
    {.dispatch = payload_dtype::fp32, .combine = payload_dtype::bf16, .sum = combine_sum::per_rank}, plan);
  CHECK(d[0]->rows.num_rows == 2);
  CHECK(d[1]->rows.num_rows == 1);
  CHECK(plan.pair_row == std::vector<int32_t>{0, 0, 1, 1});
  // rank 0 answers its own dispatch in fp32 (rows for tokens 0 and 1), rank 1 in bf16 (token 0)
  const float own[] = {1.0f, 1.0f / 3.0f, 100.0f, 200.0f};
  const float remote[] = {1.0f / 3.0f, 1.0f};
  const std::vector<std::shared_ptr<const ep_combine>> answers = {
    std::make_shared<ep_combine>(
      ep_combine{.key = {}, .src_rank = 0, .outputs = encode_rows(own, 2, 2, payload_dtype::fp32)}),
    std::make_shared<ep_combine>(
      ep_combine{.key = {}, .src_rank = 1, .outputs = encode_rows(remote, 1, 2, payload_dtype::bf16)})};
  std::vector<float> out(4);
  combine_outputs(plan, answers, out.data(), 2);
  // bf16(1/3) = 0x3EAB = 0.333984375; token 0 = own row 0 + remote row 0, token 1 = own row 1
  CHECK(out == std::vector<float>{1.0f + 0.333984375f, 1.0f / 3.0f + 1.0f, 100.0f, 200.0f});
}

TEST_CASE("dispatch sends each token once per rank and spreads replicas") {
  // 4 experts on 2 ranks plus 2 replicas of experts 0 and 1: slots [0 1 2 | 3 0 1]
  const layer_placement p = default_layer_placement(4, 2, 2);
  CHECK(p.slot_expert == std::vector<int32_t>{0, 1, 2, 3, 0, 1});
  CHECK(p.expert_slots[0] == std::vector<int32_t>{0, 4});
  const int64_t D = 2, K = 2, T = 2;
  const std::vector<float> x = {1, 2, 3, 4};
  const std::vector<int32_t> ids = {
    0, 2,   // token 0: expert 0 -> replica (0 + src 0) % 2 = slot 0 (rank 0); 2 -> rank 0
    0, 3};  // token 1: expert 0 -> slot 4 (rank 1); 3 -> rank 1
  const std::vector<float> wts = {0.5f, 0.25f, 1.0f, 2.0f};
  dispatch_plan plan;
  auto d = make_dispatches(p, {}, 0, x, ids, wts, T, D, K, {}, plan);
  REQUIRE(d.size() == 2);
  CHECK(d[0]->rows.num_rows == 1);  // token 0 once, for two pairs
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
  const std::vector<int32_t> ids = {0};  // expert 0 lives on rank 0
  const std::vector<float> wts = {1.0f};
  dispatch_plan plan;
  auto d = make_dispatches(p, {}, 0, x, ids, wts, 1, D, 1, {}, plan);
  const std::vector<std::shared_ptr<const ep_dispatch>> wrong = {d[0]};
  CHECK_THROWS_AS((void)run_dispatched_experts(*ref, held_of(w, w.config.first_k_dense_replace, p, 1), 1,
                                               wrong, D),
                  std::logic_error);
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 2}, 2, 3), std::invalid_argument);     // 3 slots, 2 ranks
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 1, 0}, 2, 3), std::invalid_argument);  // expert 2 missing
  CHECK_THROWS_AS((void)make_layer_placement({0, 1, 5, 2}, 2, 3), std::invalid_argument);  // no expert 5
  CHECK_THROWS_AS((void)make_dispatches(p, {}, 0, x, ids, wts, 1, D, 1,
                                        {.dispatch = payload_dtype::fp8, .combine = payload_dtype::fp8},
                                        plan),
                  std::invalid_argument);
}

TEST_CASE("survivors of a lost node: every expert over fewer ranks, slots rounded up to split evenly") {
  // a dense layer, then 16 experts over 4 ranks, 4 redundant slots on the third layer
  const std::vector<layer_placement> first = {
    {}, default_layer_placement(16, 0, 4), default_layer_placement(16, 4, 4)};
  const std::vector<layer_placement> two = placements_for_survivors(first, 2);
  REQUIRE(two.size() == 3);
  CHECK(two[0].slot_expert.empty());
  CHECK(two[1].slots_per_rank == 8);  // 16 slots: experts 0-7, then 8-15
  CHECK(experts_of_rank(two[1], 0) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(experts_of_rank(two[1], 1) == std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(two[2].slots_per_rank == 10);  // 20 slots split over 2 as they are
  CHECK(experts_of_rank(two[2], 1) == std::vector<int32_t>{0, 1, 2, 3, 10, 11, 12, 13, 14, 15});
  const std::vector<layer_placement> three = placements_for_survivors(first, 3);
  CHECK(three[1].num_ranks == 3);
  CHECK(three[1].slots_per_rank == 6);  // 18 slots: experts 0 and 1 twice
  CHECK(three[1].expert_slots[0] == std::vector<int32_t>{0, 16});
  CHECK(three[1].expert_slots[1] == std::vector<int32_t>{1, 17});
  CHECK(three[1].expert_slots[2] == std::vector<int32_t>{2});
  CHECK(experts_of_rank(three[1], 2) == std::vector<int32_t>{0, 1, 12, 13, 14, 15});
  CHECK(three[2].slots_per_rank == 7);  // 20 slots round up to 21
  const std::vector<layer_placement> one = placements_for_survivors(first, 1);
  CHECK(experts_of_rank(one[1], 0).size() == 16);
  CHECK_THROWS_AS((void)placements_for_survivors(first, 0), std::invalid_argument);
}

TEST_CASE("answer groups: one expert batch for small dispatches, peers first one by one for large ones") {
  // dispatches from ranks 0..R-1 with the given pair counts (received in src_rank order)
  auto received = [](std::vector<int64_t> pairs) {
    std::vector<std::shared_ptr<const ep_dispatch>> out;
    for (size_t r = 0; r < pairs.size(); ++r) {
      auto d = std::make_shared<ep_dispatch>();
      d->src_rank = static_cast<int64_t>(r);
      d->pair_row.assign(static_cast<size_t>(pairs[r]), 0);
      out.push_back(d);
    }
    return out;
  };
  using groups = std::vector<std::vector<size_t>>;
  const int64_t slots = 4, min_rows = 32;  // a split needs 128 pairs from each peer
  // decode-sized: one batch, each expert's weights read once
  CHECK(answer_groups(received({3, 5}), 0, slots, min_rows) == groups{{0, 1}});
  // prefill-sized from every peer: the peers, then this rank's own (however small)
  CHECK(answer_groups(received({128, 200}), 0, slots, min_rows) == groups{{1}, {0}});
  CHECK(answer_groups(received({128, 0}), 1, slots, min_rows) == groups{{0}, {1}});
  // four ranks: ring order after this rank
  CHECK(answer_groups(received({500, 500, 7, 500}), 2, slots, min_rows) == groups{{3}, {0}, {1}, {2}});
  CHECK(answer_groups(received({500, 500, 500, 500}), 0, slots, min_rows) == groups{{1}, {2}, {3}, {0}});
  // one small peer keeps the single batch
  CHECK(answer_groups(received({500, 127, 500, 500}), 0, slots, min_rows) == groups{{0, 1, 2, 3}});
  // a group of one: nothing to answer early
  CHECK(answer_groups(received({1000}), 0, slots, min_rows) == groups{{0}});
  // 0 rows: always split
  CHECK(answer_groups(received({0, 0}), 1, slots, 0) == groups{{0}, {1}});
}
