// tests/actors/test_front_cluster.cpp
// The front node orders the ranks the nodes' rosters list into the cluster's groups: every rank
// exactly once, in group order whatever the order the nodes joined in (a group may span nodes);
// a missing rank, one listed twice or one out of range is an error naming it. After a node is
// lost, a group's ranks on the nodes still up, in group order. An expert balancer's decision for
// a split group is kept on the front for the group's whole memberships, never the survivors';
// one for a group a node hosts whole goes to that node's keeper, through the front supervisor. A
// front started again numbers its memberships above those the ranks hold.
#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "actor_fixture.hpp"
#include "actors/front_cluster.hpp"
#include "actors/group_roster.hpp"

using moe::testing::actor_fixture;

namespace {

caf::behavior idle(caf::event_based_actor*) {
  return {[](int32_t) {}};
}

// The error ranks_in_order throws, or "" when it does not.
std::string error_of(const std::vector<moe::node_roster>& rosters, bool prefill, int64_t count) {
  try {
    (void)moe::ranks_in_order(rosters, prefill, count);
  } catch (const moe::input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE_FIXTURE(actor_fixture, "front: the rosters' ranks in group order, whichever node joined first") {
  std::vector<caf::actor> a;
  a.reserve(5);
  for (int i = 0; i < 5; ++i)
    a.push_back(sys.spawn(idle));
  const moe::node_roster decode{.node = "decode-0",
                                .first_prefill_rank = 0,
                                .prefill_ranks = {},
                                .first_decode_rank = 0,
                                .decode_ranks = {a[2], a[3], a[4]}};
  const moe::node_roster prefill{.node = "prefill-0",
                                 .first_prefill_rank = 0,
                                 .prefill_ranks = {a[0], a[1]},
                                 .first_decode_rank = 0,
                                 .decode_ranks = {}};
  CHECK(moe::ranks_in_order({decode, prefill}, true, 2) == std::vector<caf::actor>{a[0], a[1]});
  CHECK(moe::ranks_in_order({decode, prefill}, false, 3) == std::vector<caf::actor>{a[2], a[3], a[4]});

  CHECK(error_of({decode, prefill}, false, 4) == "no node lists decode rank 3");
  CHECK(error_of({decode, prefill}, true, 1) == "node prefill-0 lists prefill rank 1, but the cluster has 1");
  moe::node_roster twice = prefill;
  twice.node = "prefill-1";
  CHECK(error_of({prefill, twice}, true, 2) == "prefill rank 0 is listed by nodes prefill-0 and prefill-1");
  // decode ranks 0-1 on one node and 2 on another: one expert-parallel group over two processes
  const moe::node_roster first{.node = "decode-0",
                               .first_prefill_rank = 0,
                               .prefill_ranks = {},
                               .first_decode_rank = 0,
                               .decode_ranks = {a[2], a[3]},
                               .data_address = "d0"};
  const moe::node_roster second{.node = "decode-1",
                                .first_prefill_rank = 0,
                                .prefill_ranks = {},
                                .first_decode_rank = 2,
                                .decode_ranks = {a[4]},
                                .data_address = "d1"};
  CHECK(moe::ranks_in_order({second, first}, false, 3) == std::vector<caf::actor>{a[2], a[3], a[4]});
  CHECK(moe::split_over_nodes({prefill, first, second}, false));
  CHECK_FALSE(moe::split_over_nodes({prefill, first, second}, true));
  CHECK_FALSE(moe::split_over_nodes({decode, prefill}, false));
  // decode-0 lost: decode rank 2 goes on alone; decode-1 lost: ranks 0 and 1, still in order
  const std::vector<moe::node_roster> three = {second, prefill, first};
  const moe::group_alive without_first = moe::ranks_alive(three, false, {false, false, true});
  CHECK(without_first.indices == std::vector<int64_t>{2});
  CHECK(without_first.ranks == std::vector<caf::actor>{a[4]});
  const moe::group_alive without_second = moe::ranks_alive(three, false, {true, false, false});
  CHECK(without_second.indices == std::vector<int64_t>{0, 1});
  CHECK(without_second.ranks == std::vector<caf::actor>{a[2], a[3]});
  const moe::group_alive all = moe::ranks_alive(three, false, {false, false, false});
  CHECK(all.ranks == std::vector<caf::actor>{a[2], a[3], a[4]});
  CHECK(all.data_addresses == std::vector<std::string>{"d0", "d0", "d1"});   // each rank's node's plane
  CHECK(moe::ranks_alive(three, true, {false, true, false}).ranks.empty());  // the prefill node lost
  for (const caf::actor& x : a)
    caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(
  actor_fixture,
  "front: a split group's EPLB decision is kept for its whole memberships, not for survivors") {
  auto kept = std::make_shared<moe::front_placements>();
  const moe::placement_keeper keeper = moe::keep_front_placements(kept);
  const auto keep = [&](const std::string& kind, const moe::placement_change& d, bool renew) {
    return std::get<bool>(keeper(kind, d, renew));  // a split group's: kept (or not) on the front
  };
  auto placement = std::make_shared<const std::vector<moe::layer_placement>>(
    std::vector<moe::layer_placement>{{}, moe::make_layer_placement({1, 0, 3, 2}, 2, 4)});
  // decode ranks 0 and 1 on two nodes; `self` stands for both, and hears their memberships
  const caf::actor me = caf::actor_cast<caf::actor>(self);
  const moe::node_roster a{.node = "a", .first_decode_rank = 0, .decode_ranks = {me}, .data_address = "x"};
  const moe::node_roster b{.node = "b", .first_decode_rank = 1, .decode_ranks = {me}, .data_address = "y"};
  const auto memberships = [&](size_t n) {
    std::vector<moe::ep_membership> got;
    for (size_t i = 0; i < n; ++i)
      self->receive([&](moe::peers_atom, const moe::ep_membership& m) { got.push_back(m); },
                    caf::after(std::chrono::seconds(5)) >> [] { FAIL("no membership"); });
    return got;
  };
  moe::note_group_keepers({a, b}, *kept);
  CHECK(kept->decode.split);
  moe::introduce_split_groups({a, b}, {}, 2, 0, kept.get());
  for (const moe::ep_membership& m : memberships(2))
    CHECK(m.placements == nullptr);  // nothing decided yet: the placement the group began with

  moe::placement_change decision{.epoch = 1, .membership_first_step = 0, .placements = placement};
  CHECK_FALSE(keep("prefill_balancer", decision, false));  // not a group
  decision.membership_first_step = 7;                      // planned for a membership that is gone
  CHECK_FALSE(keep("decode_rank", decision, false));
  decision.membership_first_step = 0;
  CHECK(keep("decode_rank", decision, false));
  CHECK(kept->decode.placements == placement);
  CHECK(kept->decode.epoch == 1);
  CHECK_FALSE(keep("decode_rank", decision, true));  // no node watch to renew the group yet

  // node b lost: the survivor gets no placement (it takes one over itself), and a decision
  // planned meanwhile is not kept; b back: the whole group gets the kept one
  moe::introduce_split_groups({a, b}, {false, true}, 2, 100, kept.get());
  std::vector<moe::ep_membership> alone = memberships(1);
  CHECK(alone[0].peers.size() == 1);
  CHECK(alone[0].global_ranks == std::vector<int64_t>{2});
  CHECK(alone[0].placements == nullptr);
  CHECK_FALSE(
    keep("decode_rank", {.epoch = 2, .membership_first_step = 100, .placements = placement}, false));
  moe::introduce_split_groups({a, b}, {}, 2, 200, kept.get());
  for (const moe::ep_membership& m : memberships(2)) {
    CHECK(m.first_step == 200);
    CHECK(m.placements == placement);
    CHECK(m.placement_epoch == 1);
  }
  // a renewal asks the node watch for new memberships, once there is one
  kept->watch = me;
  CHECK(keep("decode_rank", {.epoch = 3, .membership_first_step = 0, .placements = placement}, true));
  bool renewed = false;
  self->receive([&](moe::peers_atom) { renewed = true; },
                caf::after(std::chrono::seconds(5)) >> [] { FAIL("no renewal"); });
  CHECK(renewed);
  CHECK(kept->decode.epoch == 3);
}

TEST_CASE_FIXTURE(actor_fixture,
                  "front: a whole group's EPLB decision goes to its node's keeper, through the supervisor") {
  auto kept = std::make_shared<moe::front_placements>();
  // node p hosts both prefill ranks (and keeps that group's decisions), nodes a and b a decode
  // rank each; the keeper stands for p's, answering whether the decision came with `renew`
  auto asked = std::make_shared<std::vector<std::string>>();
  const moe::placement_keeper_actor node_keeper =
    sys.spawn([asked]() -> moe::placement_keeper_actor::behavior_type {
      return {
        [asked](moe::placement_atom, const std::string& kind, const moe::placement_change& d, bool renew) {
          asked->push_back(kind + " epoch " + std::to_string(d.epoch));
          return renew;
        }};
    });
  const caf::actor rank = sys.spawn(idle);
  const moe::node_roster p{.node = "p",
                           .first_prefill_rank = 0,
                           .prefill_ranks = {rank, rank},
                           .keeper = caf::actor_cast<caf::actor>(node_keeper)};
  const moe::node_roster a{.node = "a", .first_decode_rank = 0, .decode_ranks = {rank}};
  const moe::node_roster b{.node = "b", .first_decode_rank = 1, .decode_ranks = {rank}};
  auto placement = std::make_shared<const std::vector<moe::layer_placement>>(
    std::vector<moe::layer_placement>{{}, moe::make_layer_placement({1, 0, 3, 2}, 2, 4)});
  const moe::placement_change decision{.epoch = 4, .membership_first_step = 0, .placements = placement};

  const moe::placement_keeper keeper = moe::keep_front_placements(kept);
  const moe::supervisor_actor sup = moe::spawn_supervisor(sys, {}, {}, keeper);
  const auto ask = [&](bool renew) {
    bool got = !renew;
    self
      ->request(sup, std::chrono::seconds(5), moe::placement_atom::value, std::string("prefill_rank"),
                decision, renew)
      .receive([&](bool recorded) { got = recorded; }, [](const caf::error& e) { FAIL(to_string(e)); });
    return got;
  };
  const moe::placement_kept before = keeper("prefill_rank", decision, false);  // p has not joined yet
  REQUIRE(std::holds_alternative<moe::placement_keeper_actor>(before));
  CHECK_FALSE(std::get<moe::placement_keeper_actor>(before));  // no keeper: the supervisor says false
  CHECK_FALSE(ask(true));
  CHECK(asked->empty());
  moe::note_group_keepers({a, p, b}, *kept);
  CHECK_FALSE(kept->prefill.split);
  CHECK(kept->decode.split);
  const moe::placement_kept to_node = keeper("prefill_rank", decision, false);
  REQUIRE(std::holds_alternative<moe::placement_keeper_actor>(to_node));
  CHECK(std::get<moe::placement_keeper_actor>(to_node) == node_keeper);

  // a balancer asks the front supervisor, which hands the request on to p's keeper: the answer is p's
  CHECK_FALSE(ask(false));
  CHECK(ask(true));
  CHECK(*asked == std::vector<std::string>{"prefill_rank epoch 4", "prefill_rank epoch 4"});
  // p joins again: its new keeper takes the decisions
  const moe::placement_keeper_actor fresh = sys.spawn([]() -> moe::placement_keeper_actor::behavior_type {
    return {[](moe::placement_atom, const std::string&, const moe::placement_change&, bool) { return true; }};
  });
  moe::node_roster again = p;
  again.keeper = caf::actor_cast<caf::actor>(fresh);
  moe::note_group_keepers({a, again, b}, *kept);
  CHECK(ask(false));
  CHECK(asked->size() == 2);
  for (const caf::actor& h : {caf::actor_cast<caf::actor>(sup), caf::actor_cast<caf::actor>(node_keeper),
                              caf::actor_cast<caf::actor>(fresh), rank})
    caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
}

TEST_CASE("front: memberships numbered above an epoch's first step, 2^40 steps per epoch") {
  constexpr int64_t epoch = int64_t{1} << 40;
  CHECK(moe::epoch_after(0) == 0);  // fresh ranks: the first front's numbering
  CHECK(moe::epoch_after(1) == 1);
  CHECK(moe::epoch_after(epoch - 1) == 1);
  CHECK(moe::epoch_after(epoch) == 2);
  CHECK(moe::epoch_after(3 * epoch + 5) == 4);
  CHECK(moe::epoch_first_step(moe::epoch_after(3 * epoch)) > 3 * epoch);
}

TEST_CASE_FIXTURE(actor_fixture,
                  "front: a front started again numbers the split groups' memberships above the ranks' own") {
  // decode ranks on nodes a and b hold memberships an earlier front gave (first steps below);
  // the prefill group is node p's whole, so its rank's (larger) first step is not the front's
  const auto rank_at = [&](int64_t first_step) {
    return caf::actor_cast<caf::actor>(sys.spawn([first_step]() -> caf::behavior {
      return {[first_step](moe::placement_atom) {
        return moe::placement_report{
          .epoch = 0, .slot_expert = {}, .membership_first_step = first_step, .num_steps_run = 0};
      }};
    }));
  };
  constexpr int64_t epoch = int64_t{1} << 40;
  const caf::actor a0 = rank_at(3 * epoch), b0 = rank_at(2 * epoch), p0 = rank_at(9 * epoch);
  const caf::actor silent = sys.spawn(idle);  // a rank whose node is being lost: left out
  const moe::node_roster p{.node = "p", .first_prefill_rank = 0, .prefill_ranks = {p0}};
  const moe::node_roster a{.node = "a", .first_decode_rank = 0, .decode_ranks = {a0}};
  const moe::node_roster b{.node = "b", .first_decode_rank = 1, .decode_ranks = {b0, silent}};
  CHECK(moe::first_front_epoch(sys, {p, a, b}, std::chrono::milliseconds(200)) == 4);
  const moe::node_roster fresh_a{.node = "a", .first_decode_rank = 0, .decode_ranks = {rank_at(0)}};
  const moe::node_roster fresh_b{.node = "b", .first_decode_rank = 1, .decode_ranks = {rank_at(0)}};
  CHECK(moe::first_front_epoch(sys, {p, fresh_a, fresh_b}, std::chrono::milliseconds(200)) == 0);
  for (const caf::actor& h : {a0, b0, p0, silent, fresh_a.decode_ranks[0], fresh_b.decode_ranks[0]})
    caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
}
