// tests/policy/test_micro_batch.cpp
// Two micro-batches of equal attention cost, splitting one prompt when that balances better.
#include <doctest/doctest.h>

#include <cmath>

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
