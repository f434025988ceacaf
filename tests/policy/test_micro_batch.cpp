// tests/policy/test_micro_batch.cpp
// Two micro-batches of equal cost, or with micro-batch 0 taking a given share (attention alone, or
// with the linear work per token), splitting one prompt when that comes closer; a decode batch
// dealt out whole requests at a time to the cheapest micro-batch so far.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include "actors/policy/micro_batch.hpp"

using namespace moe;

TEST_CASE("attention cost of a segment counts the keys each token sees") {
  CHECK(attention_cost({0, 0, 4}) == doctest::Approx(1 + 2 + 3 + 4));
  CHECK(attention_cost({0, 10, 2}) == doctest::Approx(11 + 12));
}

TEST_CASE("one long prompt is split so both halves cost about the same") {
  // 100 tokens from 0: cost 5050; split after k with k(k+1)/2 closest to 2525 -> k = 71 (2556)
  const auto mb = split_micro_batches({{0, 0, 100}});
  REQUIRE(mb[0].size() == 1);
  REQUIRE(mb[1].size() == 1);
  CHECK(mb[0][0].num_tokens == 71);
  CHECK(mb[1][0].start == 71);
  CHECK(mb[1][0].num_tokens == 29);
  const double c0 = attention_cost(mb[0][0]), c1 = attention_cost(mb[1][0]);
  CHECK(std::abs(c0 - c1) / (c0 + c1) < 0.02);
}

TEST_CASE("equal prompts split evenly without cutting any") {
  const auto mb = split_micro_batches({{0, 0, 8}, {1, 0, 8}, {2, 0, 8}, {3, 0, 8}});
  CHECK(mb[0].size() == 2);
  CHECK(mb[1].size() == 2);
  CHECK(mb[1][0].request_idx == 2);
  CHECK(mb[1][0].num_tokens == 8);
}

TEST_CASE("every token lands in exactly one micro-batch") {
  const std::vector<prefill_segment> batch = {{0, 5, 3}, {1, 0, 40}, {2, 100, 7}, {3, 0, 1}};
  const auto mb = split_micro_batches(batch);
  int64_t total = 0;
  for (const auto& part : mb)
    for (const auto& s : part)
      total += s.num_tokens;
  CHECK(total == 3 + 40 + 7 + 1);
  CHECK(split_micro_batches({{0, 0, 1}})[1].empty());
}

TEST_CASE("step cost from the model's shapes, by hand for the tiny preset") {
  model_config c;
  c.hidden_size = 64;
  c.num_hidden_layers = 3;
  c.first_k_dense_replace = 1;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.n_routed_experts = 16;
  c.num_experts_per_tok = 4;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 32;
  // attention weights: q_a 64x32 + q_b 32x(4x24) + kv_a 64x(16+8) + kv_b 16x(4x(16+16)) + o (4x16)x64
  //   = 2048 + 3072 + 1536 + 2048 + 4096 = 12800
  // dense FFN 3 x 64 x 128 = 24576; MoE: 3 x 64 x 32 x (4 + 1) + router 64 x 16 = 31744
  // per token: 2 x (12800 + 24576) + 2 x 2 x (12800 + 31744) = 252928
  // per key, absorbed: 2 x 4 heads x ((16 + 8) + 16) x 3 layers = 960 (naive: (24 + 16), the same)
  const step_cost cost = step_cost_of(c);
  CHECK(cost.per_token == doctest::Approx(252928.0));
  CHECK(cost.per_key == doctest::Approx(960.0));
  CHECK(segment_cost({0, 10, 2}, cost) == doctest::Approx(2 * 252928.0 + 960.0 * (11 + 12)));
  // the small preset's attention dims, where the forms differ: 16 heads, latent 128, rope 32,
  // nope 64, v 64; absorbed 2 x 16 x ((128 + 32) + 128) x 3 = 27648, naive 2 x 16 x (96 + 64) x 3
  // = 15360
  c.num_attention_heads = 16;
  c.kv_lora_rank = 128;
  c.qk_rope_head_dim = 32;
  c.qk_nope_head_dim = 64;
  c.v_head_dim = 64;
  CHECK(step_cost_of(c).per_key == doctest::Approx(27648.0));
  CHECK(step_cost_of(c, /*absorbed=*/false).per_key == doctest::Approx(15360.0));
}

TEST_CASE("with linear work in the cost, a prompt splits near its middle") {
  // per token 100, per key 1: cost(first k of 100) = 100k + k(k+1)/2; total 10000 + 5050 = 15050,
  // half 7525: k = 58 gives 5800 + 1711 = 7511 (gap 14), k = 59 gives 5900 + 1770 = 7670 (gap 145)
  // -> 58 tokens in micro-batch 0 (attention alone would put 71 there)
  const auto mb = split_micro_batches({{0, 0, 100}}, {.per_token = 100.0, .per_key = 1.0});
  REQUIRE(mb[0].size() == 1);
  CHECK(mb[0][0].num_tokens == 58);
  CHECK(mb[1][0].num_tokens == 42);
  // tokens alone: an even split
  const auto even = split_micro_batches({{0, 0, 100}}, {.per_token = 1.0, .per_key = 0.0});
  CHECK(even[0][0].num_tokens == 50);
}

TEST_CASE("micro-batch 0 takes the share of the cost it is given") {
  // tokens alone, 100 tokens: 0.57 of the cost is 57 tokens
  const auto tokens = split_micro_batches({{0, 0, 100}}, {.per_token = 1.0, .per_key = 0.0}, 0.57);
  CHECK(tokens[0][0].num_tokens == 57);
  CHECK(tokens[1][0].num_tokens == 43);
  // attention alone, 100 tokens: total 5050, 0.75 of it 3787.5; k(k+1)/2: k = 86 gives 3741 (gap
  // 46.5), k = 87 gives 3828 (gap 40.5) -> 87
  const auto attention = split_micro_batches({{0, 0, 100}}, {}, 0.75);
  CHECK(attention[0][0].num_tokens == 87);
  CHECK(attention[1][0].start == 87);
  // whole prompts: 4 x 8 tokens, 0.75 -> three prompts in micro-batch 0, none cut
  const auto prompts = split_micro_batches({{0, 0, 8}, {1, 0, 8}, {2, 0, 8}, {3, 0, 8}},
                                           {.per_token = 1.0, .per_key = 0.0}, 0.75);
  CHECK(prompts[0].size() == 3);
  REQUIRE(prompts[1].size() == 1);
  CHECK(prompts[1][0].request_idx == 3);
  CHECK(prompts[1][0].num_tokens == 8);
  CHECK_THROWS_AS((void)split_micro_batches({{0, 0, 8}}, {}, 0.0), std::invalid_argument);
  CHECK_THROWS_AS((void)split_micro_batches({{0, 0, 8}}, {}, 1.0), std::invalid_argument);
}

using partition = std::vector<std::vector<size_t>>;

TEST_CASE("a decode batch of 0, 1 or 2 requests: micro-batch 0 first, then the emptier one") {
  CHECK(split_decode_batch({}, {}, 2) == partition{{}, {}});
  CHECK(split_decode_batch({7}, {}, 2) == partition{{0}, {}});
  // keys 5 and 3: row 0 to micro-batch 0 (a tie at 0, the lower index), row 1 to the empty one
  CHECK(split_decode_batch({5, 3}, {}, 2) == partition{{0}, {1}});
}

TEST_CASE("a decode batch goes by cost, not by count") {
  // attention alone, keys 10, 1, 1, 1, 1: row 0 -> mb 0 (10); rows 1..4 -> mb 1 (1, 2, 3, 4 < 10)
  CHECK(split_decode_batch({10, 1, 1, 1, 1}, {}, 2) == partition{{0}, {1, 2, 3, 4}});
  // 8 equal requests alternate, each tie going to micro-batch 0
  CHECK(split_decode_batch({4, 4, 4, 4, 4, 4, 4, 4}, {}, 2) == partition{{0, 2, 4, 6}, {1, 3, 5, 7}});
  // keys 6, 1, 1, 1 with 5 per token: costs 11, 6, 6, 6. Row 0 -> mb 0 (11); row 1 -> mb 1 (6);
  // row 2 -> mb 1 (6 < 11: 12); row 3 -> mb 0 (11 < 12: 17). Attention alone keeps rows 1..3 together.
  CHECK(split_decode_batch({6, 1, 1, 1}, {.per_token = 5.0, .per_key = 1.0}, 2) == partition{{0, 3}, {1, 2}});
  CHECK(split_decode_batch({6, 1, 1, 1}, {}, 2) == partition{{0}, {1, 2, 3}});
}

TEST_CASE("a decode batch with one micro-batch keeps every request in it") {
  CHECK(split_decode_batch({3, 9, 1}, {}, 1) == partition{{0, 1, 2}});
  CHECK(split_decode_batch({}, {}, 1) == partition{{}});
  CHECK_THROWS_AS((void)split_decode_batch({1}, {}, 0), std::invalid_argument);
}
