// tests/policy/test_expert_placement.cpp
// From an EPLB plan to an installed placement, hand-worked: slots per group, replicas a change
// copies, laying the plan's rank blocks over the ranks so that replicas stay, per-rank loads and
// balancedness, and a whole plan whose packing is worked out by hand (eplb.py's greedy).
#include <doctest/doctest.h>

#include <set>
#include <stdexcept>

#include "actors/policy/expert_placement.hpp"

using namespace moe;

namespace {

std::set<int32_t> block(const std::vector<int32_t>& slots, size_t r, size_t k) {
  return {slots.begin() + static_cast<std::ptrdiff_t>(r * k),
          slots.begin() + static_cast<std::ptrdiff_t>((r + 1) * k)};
}

}  // namespace

TEST_CASE("expert placement: a group's slots round up so that every rank holds as many") {
  CHECK(group_slots(16, 0, 4) == 16);
  CHECK(group_slots(16, 3, 4) == 20);
  CHECK(group_slots(16, 4, 4) == 20);
  CHECK(group_slots(16, 0, 3) == 18);
  CHECK_THROWS_AS((void)group_slots(16, -1, 4), std::invalid_argument);
}

TEST_CASE("expert placement: what a change copies, and keeping replicas where they are") {
  // two ranks swap their experts: 4 copies; laid over the other way round, none
  const std::vector<int32_t> from{0, 1, 2, 3};
  CHECK(replicas_moved(from, {2, 3, 0, 1}, 2) == 4);
  CHECK(keep_in_place(from, {2, 3, 0, 1}, 2) == from);
  CHECK(replicas_moved(from, keep_in_place(from, {2, 3, 0, 1}, 2), 2) == 0);
  // 4 experts on 2 ranks grow to 6 slots (experts 0 and 3 replicated). The plan's block 0
  // {3, 2, 0} keeps 2 of rank 1's {2, 3} and 1 of rank 0's {0, 1}; block 1 {1, 0, 3} keeps 2
  // of rank 0's: block 0 goes to rank 1, block 1 to rank 0, and the experts a rank held keep
  // their old positions: rank 0 [0, 1, 3], rank 1 [2, 3, 0]. Each rank copies one replica (3
  // to rank 0, 0 to rank 1), against two each as planned.
  const std::vector<int32_t> to{3, 2, 0, 1, 0, 3};
  CHECK(replicas_moved(from, to, 2) == 4);
  const std::vector<int32_t> kept = keep_in_place(from, to, 2);
  CHECK(kept == std::vector<int32_t>{0, 1, 3, 2, 3, 0});
  CHECK(replicas_moved(from, kept, 2) == 2);
  // a second replica of an expert on the same rank is not copied twice
  CHECK(replicas_moved({0, 1, 2, 3}, {0, 0, 2, 3}, 2) == 0);
  CHECK(replicas_moved({0, 1, 2, 3}, {1, 1, 2, 3}, 2) == 0);
  CHECK(replicas_moved({0, 1, 2, 3}, {3, 3, 2, 1}, 2) == 2);  // rank 0 copies 3; rank 1 copies 1
  CHECK_THROWS_AS((void)replicas_moved({0, 1, 2}, {0, 1, 2}, 2), std::invalid_argument);
}

TEST_CASE("expert placement: per-rank loads split a replicated expert's tokens evenly") {
  // load [10, 4, 6, 8]; slots [0, 1, 3 | 2, 3, 0]: experts 0 and 3 have two replicas each
  const std::vector<double> loads = tokens_per_rank(std::vector<double>{10, 4, 6, 8},
                                                    std::vector<int32_t>{0, 1, 3, 2, 3, 0}, 2);
  REQUIRE(loads.size() == 2);
  CHECK(loads[0] == doctest::Approx(10.0 / 2 + 4 + 8.0 / 2));  // 13
  CHECK(loads[1] == doctest::Approx(6 + 8.0 / 2 + 10.0 / 2));  // 15
  CHECK(balancedness(loads) == doctest::Approx(14.0 / 15.0));
  CHECK(balancedness(std::vector<double>{3.0, 1.0}) == doctest::Approx(0.5 * 4.0 / 3.0));
}

TEST_CASE(
  "expert placement: a whole plan, its balancedness and its moves, with and without minimal movement") {
  // One layer, 4 experts loaded [10, 4, 6, 8], 2 ranks, no redundancy. eplb.py's global policy
  // packs heaviest first into the lightest pack with room: 10 (e0) to pack 0, 8 (e3) to pack 1,
  // 6 (e2) to pack 1 (8 < 10), 4 (e1) to pack 0: packs {0, 1} and {3, 2}, 14 tokens each.
  matrix<double> load(1, 4);
  load.data = {10, 4, 6, 8};
  // now: rank 0 holds {2, 3} (14), rank 1 {0, 1} (14): even already; pack 0 goes to rank 0 as
  // planned, so every expert would move; laid over the ranks, none does
  const placement_change_plan plain = plan_placement(load, {{2, 3, 0, 1}}, 0, 2, 1, 1, true, false);
  REQUIRE(plain.slots.size() == 1);
  CHECK(block(plain.slots[0], 0, 2) == std::set<int32_t>{0, 1});
  CHECK(block(plain.slots[0], 1, 2) == std::set<int32_t>{2, 3});
  CHECK(plain.moved == 4);
  CHECK(plain.moved_plain == 4);
  const placement_change_plan kept = plan_placement(load, {{2, 3, 0, 1}}, 0, 2, 1, 1, true, true);
  CHECK(kept.slots[0] == std::vector<int32_t>{2, 3, 0, 1});
  CHECK(kept.moved == 0);
  CHECK(kept.moved_plain == 4);
  // from an uneven placement: rank 0 {0, 3} carries 18, rank 1 {1, 2} 10
  const placement_change_plan fix = plan_placement(load, {{0, 3, 1, 2}}, 0, 2, 1, 1, true, true);
  CHECK(fix.balancedness_before[0] == doctest::Approx(14.0 / 18.0));
  CHECK(fix.balancedness_after[0] == doctest::Approx(1.0));
  CHECK(fix.moved == 2);  // one expert each way, whichever rank gets which pack
  CHECK_THROWS_AS((void)plan_placement(load, {}, 0, 2, 1, 1, true, true), std::invalid_argument);
}

TEST_CASE("expert placement: a layer keeps its placement when EPLB's greedy plan is less even") {
  // 4 experts loaded [3, 8, 6, 6], 2 ranks x 3 slots. In place: rank 0 {1, 0, 2}, rank 1
  // {3, 1, 0}, experts 0 and 1 replicated: rank 0 carries 8/2 + 3/2 + 6 = 11.5, rank 1
  // 6 + 8/2 + 3/2 = 11.5, even. EPLB replicates the heaviest per replica, 1 (8) then 2 (6 before
  // 3's 6, lower index), and packs [3, 0, 2 | 1, 1, 2]: 6 + 3 + 3 = 12 against 4 + 4 + 3 = 11,
  // balancedness 11.5 / 12. The layer stays as it is, and nothing moves.
  matrix<double> load(1, 4);
  load.data = {3, 8, 6, 6};
  const std::vector<int32_t> in_place{1, 0, 2, 3, 1, 0};
  const placement_change_plan p = plan_placement(load, {in_place}, 2, 2, 1, 1, true, false);
  CHECK(p.slots[0] == in_place);
  CHECK(p.moved == 0);
  CHECK(p.moved_plain == 0);
  CHECK(p.balancedness_before[0] == doctest::Approx(1.0));
  CHECK(p.balancedness_after[0] == doctest::Approx(1.0));
}
