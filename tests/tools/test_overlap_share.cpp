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
