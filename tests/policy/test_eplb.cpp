// tests/policy/test_eplb.cpp
// EPLB against the published README example of deepseek-ai/EPLB and the intermediate values
// derived from it (docs/reference/deepseek-system.md §3.3).
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "actors/policy/eplb.hpp"

using namespace moe;

namespace {

matrix<double> readme_weight() {
  const std::vector<double> w = {90, 132, 40,  61, 104, 165, 39,  4,   73,  56, 183, 86,
                                 20, 107, 104, 64, 19,  197, 187, 157, 172, 86, 16,  27};
  matrix<double> m(2, 12);
  m.data = w;
  return m;
}

std::vector<int32_t> row(const matrix<int32_t>& m, int64_t r) {
  return {m.data.begin() + r * m.cols, m.data.begin() + (r + 1) * m.cols};
}

}  // namespace

TEST_CASE("rebalance_experts reproduces the EPLB README example (hierarchical)") {
  const expert_plan plan = rebalance_experts(readme_weight(), 16, 4, 2, 8);
  CHECK(row(plan.phy2log, 0) == std::vector<int32_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1});
  CHECK(row(plan.phy2log, 1) == std::vector<int32_t>{7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1});
  CHECK(row(plan.logcnt, 0) == std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1});
  CHECK(row(plan.logcnt, 1) == std::vector<int32_t>{1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1});
  REQUIRE(plan.log2phy.size() == 2);
  CHECK(plan.log2phy[0].data == std::vector<int32_t>{12, -1, 15, 13, 11, -1, 6, -1, 7, 5,  0,  2,
                                                     1,  -1, 3,  -1, 4,  -1, 9, -1, 8, 10, 14, -1});
  CHECK(plan.log2phy[1].data == std::vector<int32_t>{13, -1, 15, 11, 8, -1, 14, -1, 9, -1, 10, 12,
                                                     2,  4,  0,  -1, 6, 3,  7,  -1, 1, -1, 5,  -1});
  const auto l0 = rank_loads(plan, readme_weight(), 0, 8);
  const std::vector<double> expected_l0 = {121.5, 86.5, 125, 113, 147.5, 131.5, 156, 152};
  for (size_t i = 0; i < l0.size(); ++i)
    CHECK(l0[i] == doctest::Approx(expected_l0[i]));
  const auto l1 = rank_loads(plan, readme_weight(), 1, 8);
  CHECK(*std::max_element(l1.begin(), l1.end()) == doctest::Approx(179.5));
}

TEST_CASE("balanced_packing: the README groups go to nodes as published") {
  matrix<double> tokens_per_group(2, 4);
  tokens_per_group.data = {262, 330, 116, 325, 231, 280, 516, 129};
  matrix<int32_t> pack, rank;
  balanced_packing(tokens_per_group, 2, pack, rank);
  CHECK(row(pack, 0) == std::vector<int32_t>{1, 0, 0, 1});
  CHECK(row(rank, 0) == std::vector<int32_t>{1, 0, 1, 0});
  CHECK(row(pack, 1) == std::vector<int32_t>{1, 1, 0, 0});
  CHECK(row(rank, 1) == std::vector<int32_t>{1, 0, 0, 1});
}

TEST_CASE("replicate_experts gives each extra slot to the highest load per replica") {
  matrix<double> w(1, 3);
  w.data = {100, 30, 60};
  matrix<int32_t> phy2log, rank, logcnt;
  replicate_experts(w, 5, phy2log, rank, logcnt);
  // slot 3: argmax(100, 30, 60) = 0 -> counts [2,1,1]; slot 4: argmax(50, 30, 60) = 2
  CHECK(phy2log.data == std::vector<int32_t>{0, 1, 2, 0, 2});
  CHECK(rank.data == std::vector<int32_t>{0, 0, 0, 1, 1});
  CHECK(logcnt.data == std::vector<int32_t>{2, 1, 2});
}

TEST_CASE("global policy when groups do not divide among nodes, every expert placed") {
  matrix<double> w(1, 12);
  for (int64_t e = 0; e < 12; ++e)
    w(0, e) = 10.0 + static_cast<double>((e * 7) % 12);
  const expert_plan plan = rebalance_experts(w, 18, 4, 3, 6);  // 4 % 3 != 0 -> global
  std::vector<int32_t> seen(12, 0);
  for (int32_t e : plan.phy2log.data)
    ++seen[e];
  for (int64_t e = 0; e < 12; ++e)
    CHECK(seen[e] == plan.logcnt(0, e));
  CHECK_THROWS_AS((void)rebalance_experts(w, 15, 4, 2, 8), std::invalid_argument);
}

TEST_CASE("the global policy needs neither ranks % nodes nor experts % groups, no layers, no plan") {
  matrix<double> w(1, 12);  // loads [10 17 12 19 14 21 16 11 18 13 20 15]
  for (int64_t e = 0; e < 12; ++e)
    w(0, e) = 10.0 + static_cast<double>((e * 7) % 12);
  // 4 groups over 3 nodes: global, 4 ranks (4 % 3 != 0). No replicas; by hand, heaviest first
  // into the lightest rank with room (ties: lower rank): 21 20 19 18 to ranks 0-3, then
  // 17 -> 3, 16 -> 2, 15 -> 1, 14 -> 0, 13 -> 0, 12 -> 1, 11 -> 2, 10 -> 3; slots in that order
  const expert_plan plan = rebalance_experts(w, 12, 4, 3, 4);
  CHECK(plan.phy2log.data == std::vector<int32_t>{5, 4, 9, 10, 11, 2, 3, 6, 7, 8, 1, 0});
  CHECK(plan.logcnt.data == std::vector<int32_t>(12, 1));
  CHECK(rank_loads(plan, w, 0, 4) == std::vector<double>{48, 47, 46, 45});
  // 12 experts in 5 groups over 2 nodes: global too
  CHECK_NOTHROW((void)rebalance_experts(w, 12, 5, 2, 4));
  // hierarchical (4 groups over 2 nodes) still needs ranks % nodes
  CHECK_THROWS_AS((void)rebalance_experts(w, 12, 4, 2, 3), std::invalid_argument);
  const expert_plan none = rebalance_experts(matrix<double>(0, 12), 16, 4, 2, 8);
  CHECK(none.phy2log.rows == 0);
  CHECK(none.phy2log.cols == 16);
  CHECK(none.log2phy.empty());
  CHECK_THROWS_AS((void)rebalance_experts(matrix<double>(1, 0), 16, 4, 2, 8), std::invalid_argument);
}
