// tests/tools/test_overlap_share.cpp
// bench-cluster's hidden share against hand-worked schedules: what a perfect overlap, a partial
// one and none leave exposed, with the link carrying more and less than the compute.
#include <doctest/doctest.h>

#include "tools/overlap_share.hpp"

using namespace moe::tools;

TEST_CASE("hidden share: a schedule that hides all it can scores 1 on either side of comm = compute") {
  // 100 ms on the link, 80 ms of MoE compute: at best 80 ms of the link hide, 20 ms stay exposed.
  // (A share of comm alone would give 80 / 100 here for the best schedule there is.)
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.080, .exposed_s = 0.020}) == doctest::Approx(1.0));
  // 60 ms on the link under 100 ms of compute: all of it can hide.
  CHECK(hidden_share({.comm_s = 0.060, .compute_s = 0.100, .exposed_s = 0.0}) == doctest::Approx(1.0));
}

TEST_CASE("hidden share: partial and no overlap") {
  // 100 ms link, 80 ms compute, 40 ms exposed: 60 of the 80 that could hide did -> 0.75
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.080, .exposed_s = 0.040}) == doctest::Approx(0.75));
  // 60 ms link, 100 ms compute, 15 ms exposed: 45 of 60 -> 0.75
  CHECK(hidden_share({.comm_s = 0.060, .compute_s = 0.100, .exposed_s = 0.015}) == doctest::Approx(0.75));
  // one micro-batch hides nothing: the whole link time is added to the step
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.080, .exposed_s = 0.100}) == doctest::Approx(0.0));
}

TEST_CASE("hidden share: run-to-run noise is clamped, nothing to hide is -1") {
  // the run with the link came out faster than the one without: more than all hidden -> 1
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.080, .exposed_s = -0.005}) == doctest::Approx(1.0));
  // the link added more than its own busy time: less than nothing hidden -> 0
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.080, .exposed_s = 0.130}) == doctest::Approx(0.0));
  CHECK(hidden_share({.comm_s = 0.0, .compute_s = 0.080, .exposed_s = 0.0}) == -1.0);
  CHECK(hidden_share({.comm_s = 0.100, .compute_s = 0.0, .exposed_s = 0.0}) == -1.0);
}

TEST_CASE(
  "hidden share against neighbouring steps: each step on the link against the mean of its neighbours off it") {
  // off, on, off, on after the run's first step: the first step on the link against
  // (100 + 110) / 2 = 105 ms and waits (4 + 6) / 2 = 5 ms; the last has one neighbour (110 ms, 6 ms).
  const std::vector<step_sample> steps = {
    {.step_s = 0.300, .wait_s = 0.200, .moe_s = 0.080, .comm_s = 0.0},  // the run's first: no neighbour
    {.step_s = 0.100, .wait_s = 0.004, .moe_s = 0.080, .comm_s = 0.0},
    {.step_s = 0.125, .wait_s = 0.025, .moe_s = 0.080, .comm_s = 0.100},  // +20 ms, waits +20 ms
    {.step_s = 0.110, .wait_s = 0.006, .moe_s = 0.082, .comm_s = 0.0},
    {.step_s = 0.140, .wait_s = 0.036, .moe_s = 0.090, .comm_s = 0.060},  // +30 ms, waits +30 ms
  };
  const neighbour_shares s = shares_against_neighbours(steps);
  REQUIRE(s.hidden.size() == 2);
  REQUIRE(s.by_waits.size() == 2);
  CHECK(s.hidden[0] == doctest::Approx(1.0));  // (100 - 20) / min(80, 100)
  CHECK(s.by_waits[0] == doctest::Approx(1.0));
  CHECK(s.hidden[1] == doctest::Approx(0.5));  // (60 - 30) / min(90, 60)
  CHECK(s.by_waits[1] == doctest::Approx(0.5));
}

TEST_CASE("hidden share against neighbouring steps: no pair without a neighbour off the link") {
  // two steps on the link side by side: neither has a clean comparison; a run all on the link
  // or all off it gives nothing
  const std::vector<step_sample> steps = {
    {.step_s = 0.300, .wait_s = 0.100, .moe_s = 0.080, .comm_s = 0.050},  // the run's first: no pair
    {.step_s = 0.100, .wait_s = 0.004, .moe_s = 0.080, .comm_s = 0.0},
    {.step_s = 0.130, .wait_s = 0.030, .moe_s = 0.080, .comm_s = 0.050},
    {.step_s = 0.130, .wait_s = 0.030, .moe_s = 0.080, .comm_s = 0.050},
    {.step_s = 0.100, .wait_s = 0.004, .moe_s = 0.080, .comm_s = 0.0},
    {.step_s = 0.120, .wait_s = 0.024, .moe_s = 0.080, .comm_s = 0.040},  // +20 of 40: half
  };
  const neighbour_shares s = shares_against_neighbours(steps);
  REQUIRE(s.hidden.size() == 1);
  CHECK(s.hidden[0] == doctest::Approx(0.5));
  CHECK(s.by_waits[0] == doctest::Approx(0.5));
  CHECK(shares_against_neighbours({steps[0], steps[2], steps[3]}).hidden.empty());
  CHECK(shares_against_neighbours({steps[0], steps[1], steps[4]}).hidden.empty());
  CHECK(shares_against_neighbours({}).hidden.empty());
}

TEST_CASE(
  "hidden share against neighbouring steps: the run's first step and steps carrying little are left out") {
  // A new cluster's first step is slow whatever the link does: no neighbour (with it, the next
  // step would score 1). A decode run's first steps carry a few requests' traffic: 4 ms on the
  // link against the median step's 100 ms is noise against the step's jitter: no share.
  const std::vector<step_sample> steps = {
    {.step_s = 0.300, .wait_s = 0.100, .moe_s = 0.080, .comm_s = 0.0},    // the run's first
    {.step_s = 0.130, .wait_s = 0.035, .moe_s = 0.080, .comm_s = 0.100},  // (100 - 30) / 80
    {.step_s = 0.100, .wait_s = 0.005, .moe_s = 0.080, .comm_s = 0.0},
    {.step_s = 0.050, .wait_s = 0.010, .moe_s = 0.010, .comm_s = 0.004},  // under 50: skipped
    {.step_s = 0.100, .wait_s = 0.005, .moe_s = 0.080, .comm_s = 0.0},
    {.step_s = 0.150, .wait_s = 0.055, .moe_s = 0.080, .comm_s = 0.100},  // (100 - 50) / 80
  };
  const neighbour_shares s = shares_against_neighbours(steps);
  REQUIRE(s.hidden.size() == 2);
  CHECK(s.hidden[0] == doctest::Approx(0.875));
  CHECK(s.hidden[1] == doctest::Approx(0.625));
  CHECK(s.by_waits[0] == doctest::Approx(0.875));
  CHECK(s.by_waits[1] == doctest::Approx(0.625));
}
