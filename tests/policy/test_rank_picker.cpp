// tests/policy/test_rank_picker.cpp
// Prefill and decode rank choice on hand-worked loads.
#include <doctest/doctest.h>

#include "actors/policy/rank_picker.hpp"

using namespace moe;

TEST_CASE("prefill: a long prompt goes where attention cost is lowest, ties to the lower rank") {
  // rank 0: one 100-token prompt queued (cost 10000); rank 1: four 25-token prompts (cost 2500)
  const std::vector<prefill_load> loads = {{10000.0, 100}, {2500.0, 100}};
  CHECK(pick_prefill_rank(loads, 60) == 1);
  CHECK(pick_prefill_rank({{0.0, 0}, {0.0, 0}}, 10) == 0);
}

TEST_CASE("prefill: equal attention cost, fewer queued tokens wins") {
  const std::vector<prefill_load> loads = {{400.0, 40}, {400.0, 20}};
  CHECK(pick_prefill_rank(loads, 10) == 1);
}

TEST_CASE("decode: least KV usage and fewest requests, only ranks with room") {
  const std::vector<decode_load> loads = {{.num_used_blocks = 80, .num_blocks = 100, .num_running = 2},
                                          {.num_used_blocks = 10, .num_blocks = 100, .num_running = 2},
                                          {.num_used_blocks = 10, .num_blocks = 100, .num_running = 9}};
  CHECK(pick_decode_rank(loads, 5) == 1);
  CHECK(pick_decode_rank(loads, 95) == std::nullopt);  // nobody has 95 free blocks
  CHECK(pick_decode_rank(loads, 25) == 1);
  const std::vector<decode_load> full = {
    {.num_used_blocks = 0, .num_blocks = 10, .num_running = 4, .max_running = 4},
    {.num_used_blocks = 9, .num_blocks = 10, .num_running = 0, .max_running = 4}};
  CHECK(pick_decode_rank(full, 1) == 1);  // rank 0 has no running slot left
}

// Live-configurable policies (actors/policy/live_config.hpp), on loads worked by hand.
// prefill: prompt of 60 tokens (cost 3600); means after it: cost 16100/3 = 5366.7, tokens 560/3 = 186.7
//   rank 0: cost share 13600/5366.7 = 2.53, token share 160/186.7 = 0.86
//   rank 1: 6100/5366.7 = 1.14, 0.86;  rank 2: 3600/5366.7 = 0.67, 360/186.7 = 1.93
TEST_CASE("prefill policies: deepseek weights, least_tokens, round_robin, drained ranks") {
  const std::vector<prefill_load> loads = {{10000.0, 100}, {2500.0, 100}, {0.0, 300}};
  prefill_balancer_settings s{.num_ranks = 3};
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 1);  // max shares 2.53, 1.14, 1.93
  s.attention_weight = 0.0;                        // tokens only: 0.86, 0.86, 1.93 -> tie to rank 0
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 0);
  s.attention_weight = 1.0;
  s.token_weight = 0.1;  // 2.53, 1.14, max(0.67, 0.19)
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 2);
  s.token_weight = 1.0;
  s.drained = {1};  // 2.53 against 1.93
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 2);
  s.drained = {};
  s.policy = "least_tokens";  // 160, 160, 360
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 0);
  s.drained = {0};
  CHECK(pick_prefill_rank(loads, 60, s, 0) == 1);
  s.policy = "round_robin";
  s.drained = {};
  CHECK(pick_prefill_rank(loads, 60, s, 1) == 1);
  CHECK(pick_prefill_rank(loads, 60, s, 5) == 2);  // 5 mod 3
  s.drained = {2};
  CHECK(pick_prefill_rank(loads, 60, s, 2) == 0);  // 2 is drained: the next in turn
}

// decode: 5 blocks wanted, max_running 10 (rank 2's 9 + 1)
//   rank 0: kv 85/100 + requests 3/10 = 1.15;  rank 1: 0.15 + 0.3 = 0.45;  rank 2: 0.15 + 1.0 = 1.15
TEST_CASE("decode policies: deepseek weights, round_robin, power_of_two, drained ranks") {
  const std::vector<decode_load> loads = {{.num_used_blocks = 80, .num_blocks = 100, .num_running = 2},
                                          {.num_used_blocks = 10, .num_blocks = 100, .num_running = 2},
                                          {.num_used_blocks = 10, .num_blocks = 100, .num_running = 9}};
  std::mt19937_64 rng(7);
  decode_balancer_settings s{.num_ranks = 3};
  CHECK(pick_decode_rank(loads, 5, s, 0, rng) == 1);
  s.kv_weight = 0.0;  // requests only: 0.3, 0.3, 1.0 -> tie to rank 0
  CHECK(pick_decode_rank(loads, 5, s, 0, rng) == 0);
  s.kv_weight = 1.0;
  s.request_weight = 0.0;  // KV only: 0.85, 0.15, 0.15 -> tie to rank 1
  CHECK(pick_decode_rank(loads, 5, s, 0, rng) == 1);
  s.request_weight = 1.0;
  CHECK(better_of_two(loads, 5, s, 2, 0) == 0);  // 1.15 each: the lower index
  CHECK(better_of_two(loads, 5, s, 2, 1) == 1);
  s.drained = {1};
  CHECK(pick_decode_rank(loads, 5, s, 0, rng) == 0);   // 1.15 and 1.15: the lower
  CHECK(pick_decode_rank(loads, 25, s, 0, rng) == 2);  // rank 0 has 20 blocks free
  s.policy = "round_robin";
  s.drained = {};
  CHECK(pick_decode_rank(loads, 5, s, 2, rng) == 2);
  CHECK(pick_decode_rank(loads, 5, s, 3, rng) == 0);
  CHECK(pick_decode_rank(loads, 25, s, 0, rng) == 1);  // rank 0 has no room: the next in turn
  CHECK(pick_decode_rank(loads, 95, s, 0, rng) == std::nullopt);
  s.policy = "power_of_two";
  s.drained = {1};
  CHECK(pick_decode_rank(loads, 25, s, 0, rng) == 2);  // the only rank with room
  CHECK(pick_decode_rank(loads, 95, s, 0, rng) == std::nullopt);
  s.drained = {};
  for (int i = 0; i < 20; ++i)  // ranks 1 and 2 have room: rank 1 is better, whatever is drawn
    CHECK(pick_decode_rank(loads, 25, s, 0, rng) == 1);
}

TEST_CASE("decode power_of_two: never the most loaded of four, often the least, same seed same picks") {
  std::vector<decode_load> loads;
  for (int64_t used : {10, 20, 30, 40})
    loads.push_back({.num_used_blocks = used, .num_blocks = 100, .num_running = 1});
  const decode_balancer_settings s{.policy = "power_of_two", .num_ranks = 4};
  std::mt19937_64 a(3), b(3);
  std::vector<int64_t> count(4, 0);
  for (int i = 0; i < 400; ++i) {
    const std::optional<int64_t> r = pick_decode_rank(loads, 1, s, 0, a);
    REQUIRE(r);
    ++count[static_cast<size_t>(*r)];
    CHECK(pick_decode_rank(loads, 1, s, 0, b) == r);
  }
  CHECK(count[3] == 0);  // worse than any other it is drawn with
  // rank 0 wins whenever drawn: P = 1/2 per pick (two of four), so 200 expected; rank 2 only
  // against 3: P = 1/6, so 67 expected
  CHECK(count[0] > 150);
  CHECK(count[0] < 250);
  CHECK(count[2] > 35);
  CHECK(count[2] < 100);
}
