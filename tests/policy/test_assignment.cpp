// tests/policy/test_assignment.cpp
// best_assignment against every permutation (the sum it reaches must be the best any pairing
// reaches) on random matrices up to 7 x 7, a hand-worked case where taking the largest gain
// first loses, the tie to the diagonal, and the refusal of a matrix that is not square; and
// keep_in_place never keeping fewer replicas than the plan as laid out.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "actors/policy/assignment.hpp"
#include "actors/policy/expert_placement.hpp"

using namespace moe;

namespace {

int64_t sum_of(const std::vector<std::vector<int64_t>>& gain, const std::vector<int64_t>& column_of) {
  int64_t s = 0;
  for (size_t i = 0; i < gain.size(); ++i)
    s += gain[i][static_cast<size_t>(column_of[i])];
  return s;
}

}  // namespace

TEST_CASE("assignment: the best pairing, where taking the largest gain first loses") {
  // largest first takes (0, 0) = 5, leaving (1, 1) = 0: 5. The best is 4 + 4 = 8.
  const std::vector<std::vector<int64_t>> gain{{5, 4}, {4, 0}};
  CHECK(best_assignment(gain) == std::vector<int64_t>{1, 0});
  // all equal: every row keeps its own column
  CHECK(best_assignment({{2, 2, 2}, {2, 2, 2}, {2, 2, 2}}) == std::vector<int64_t>{0, 1, 2});
  CHECK(best_assignment({}).empty());
  CHECK_THROWS_AS((void)best_assignment({{1, 2}, {3}}), std::invalid_argument);
}

TEST_CASE("assignment: equals the best of every permutation on random matrices") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + trial % 7;
    std::vector<std::vector<int64_t>> gain(n, std::vector<int64_t>(n));
    for (auto& row : gain)
      for (int64_t& g : row)
        g = static_cast<int64_t>(rng() % (trial % 2 ? 4 : 50));  // few values: many ties
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    int64_t best = std::numeric_limits<int64_t>::min();
    do
      best = std::max(best, sum_of(gain, perm));
    while (std::next_permutation(perm.begin(), perm.end()));
    const std::vector<int64_t> got = best_assignment(gain);
    std::vector<int64_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    std::iota(perm.begin(), perm.end(), 0);
    CAPTURE(trial);
    REQUIRE(sorted == perm);  // a bijection
    CHECK(sum_of(gain, got) == best);
  }
}

TEST_CASE("expert placement: keeping replicas in place never copies more than the plan as laid out") {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t ranks = 2 + trial % 5, k = 2 + trial % 3, experts = ranks * k - trial % 2;
    std::vector<int32_t> from(static_cast<size_t>(ranks * k)), to(from.size());
    for (size_t i = 0; i < from.size(); ++i) {
      from[i] = static_cast<int32_t>(i % static_cast<size_t>(experts));
      to[i] = static_cast<int32_t>(rng() % static_cast<uint32_t>(experts));
    }
    std::shuffle(from.begin(), from.end(), rng);
    CAPTURE(trial);
    CHECK(replicas_moved(from, keep_in_place(from, to, ranks), ranks) <= replicas_moved(from, to, ranks));
  }
}
