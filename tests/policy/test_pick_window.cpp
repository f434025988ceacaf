// tests/policy/test_pick_window.cpp
// A balancer's balancedness over its last picks, on hand-worked picks.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "actors/policy/pick_window.hpp"

using namespace moe;

TEST_CASE("pick window: per-rank load, mean / max, over the last picks only") {
  pick_window w(2, 3);
  CHECK(w.report().balancedness == 0.0);
  CHECK(w.report().num_picks == 0);
  w.add(0, 10);
  w.add(1, 30);
  balance_report r = w.report();
  CHECK(r.per_rank == std::vector<double>{10, 30});
  CHECK(r.mean == 20.0);
  CHECK(r.max == 30.0);
  CHECK(r.balancedness == doctest::Approx(20.0 / 30.0));
  w.add(0, 20);  // full: 10 + 20 on rank 0, 30 on rank 1, even
  CHECK(w.report().balancedness == 1.0);
  w.add(1, 5);  // the oldest (rank 0's 10) leaves: {20, 35}
  r = w.report();
  CHECK(r.per_rank == std::vector<double>{20, 35});
  CHECK(r.num_picks == 3);
  w.add(7, 100);  // no such rank: ignored
  CHECK(w.report().per_rank == std::vector<double>{20, 35});
  CHECK_THROWS_AS(pick_window(0), std::invalid_argument);
}
