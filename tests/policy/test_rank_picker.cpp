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
