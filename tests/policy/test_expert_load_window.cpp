// tests/policy/test_expert_load_window.cpp
// The sliding window of routed-token counts and the balancedness figures, on hand-worked steps.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "actors/policy/expert_load_window.hpp"

using namespace moe;

TEST_CASE("expert load window: sums whole buckets of the last window's steps") {
  // 1 layer x 2 experts, window 4 in 2 buckets of 2 steps: the total covers 3 to 4 steps
  expert_load_window w(1, 2, 4, 2);
  CHECK(w.total().data == std::vector<int64_t>{0, 0});
  w.add_step(std::vector<int64_t>{1, 0});   // step 1: bucket A
  w.add_step(std::vector<int64_t>{2, 10});  // step 2: bucket A (full)
  w.add_step(std::vector<int64_t>{4, 0});   // step 3: bucket B
  CHECK(w.total().data == std::vector<int64_t>{7, 10});
  CHECK(w.steps_covered() == 3);
  w.add_step(std::vector<int64_t>{8, 0});  // step 4: bucket B (full): all four steps
  CHECK(w.total().data == std::vector<int64_t>{15, 10});
  CHECK(w.steps_covered() == 4);
  w.add_step(std::vector<int64_t>{16, 1});  // step 5 drops bucket A (steps 1, 2)
  CHECK(w.total().data == std::vector<int64_t>{28, 1});
  CHECK(w.steps_covered() == 3);
  w.reset(1);
  CHECK(w.total().data == std::vector<int64_t>{0, 0});
  w.add_step(std::vector<int64_t>{3, 3});
  w.add_step(std::vector<int64_t>{5, 0});  // a window of one step keeps the last
  CHECK(w.total().data == std::vector<int64_t>{5, 0});
  CHECK(w.window_steps() == 1);
}

TEST_CASE("expert load window: refuses shapes it cannot keep") {
  CHECK_THROWS_AS(expert_load_window(1, 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(expert_load_window(1, 2, 0), std::invalid_argument);
  expert_load_window w(2, 2, 10);
  CHECK_THROWS_AS(w.add_step(std::vector<int64_t>{1, 2, 3}), std::invalid_argument);
  CHECK(expert_load_window(0, 4, 10).total().rows == 0);  // no MoE layers
}

TEST_CASE("balancedness: mean over max of the tokens each rank receives") {
  CHECK(balancedness(std::vector<double>{10, 10, 10, 10}) == 1.0);
  CHECK(balancedness(std::vector<double>{40, 0, 0, 0}) == 0.25);
  CHECK(balancedness(std::vector<double>{30, 10}) == doctest::Approx(20.0 / 30.0));
  CHECK(balancedness(std::vector<double>{0, 0}) == 0.0);
  CHECK(balancedness(std::vector<double>{}) == 0.0);
}

TEST_CASE("tokens per rank: a replicated expert's tokens split over its replicas") {
  // experts 0..3 with 8, 2, 4, 6 tokens; 3 ranks x 2 slots: rank 0 {0, 1}, rank 1 {2, 0}, rank 2 {3, 3}
  const std::vector<double> tokens = {8, 2, 4, 6};
  const std::vector<int32_t> slots = {0, 1, 2, 0, 3, 3};
  const std::vector<double> per_rank = tokens_per_rank(tokens, slots, 3);
  CHECK(per_rank == std::vector<double>{4 + 2, 4 + 4, 3 + 3});
  CHECK(balancedness(per_rank) == doctest::Approx((6.0 + 8.0 + 6.0) / 3.0 / 8.0));
}
