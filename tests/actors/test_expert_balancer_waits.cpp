// tests/actors/test_expert_balancer_waits.cpp
// The expert balancer against two stand-in ranks (plain actors answering its questions): a
// rank that goes down while it holds the balancer's request to copy its experts fails the
// rebalance at once, naming the rank, instead of at the move's timeout (CAF answers no error
// for a request its receiver dies holding); the balancer then sees that rank as restarting.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "actor_fixture.hpp"
#include "actors/expert_balancer.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

// A rank of a 2-rank group of one MoE layer, 4 experts, 2 slots each: experts 0 and 1 on rank
// 0, 2 and 3 on rank 1. Every rank reports the load {8, 8, 1, 1}, so rank 0 has 16 of 18
// tokens and the plan moves experts. `dies_when_moving`: it quits holding the copy request.
caf::behavior stand_in_rank(caf::event_based_actor* self, bool dies_when_moving) {
  return {
    [](placement_atom) {
      return placement_report{.epoch = 0, .slot_expert = {{}, {0, 1, 2, 3}}, .num_steps_run = 5};
    },
    [](expert_load_atom) {
      return expert_load{
        .num_layers = 1, .num_experts = 4, .window_steps = 10, .steps_covered = 5, .counts = {8, 8, 1, 1}};
    },
    [](expert_load_atom, int64_t) { return true; },
    [=](experts_atom, const placement_change&) -> caf::result<int64_t> {
      if (!dies_when_moving)
        return int64_t{0};
      auto held = self->make_response_promise<int64_t>();
      self->quit();  // the promise is never delivered
      return held;
    },
    [](placement_atom, uint64_t) {},  // an abort
  };
}

}  // namespace

TEST_CASE_FIXTURE(actor_fixture,
                  "expert balancer: a rank that dies holding the request to copy its experts fails "
                  "the rebalance at once, not at the move's timeout") {
  std::vector<caf::actor> ranks = {sys.spawn(stand_in_rank, false), sys.spawn(stand_in_rank, true)};
  const expert_balancer_actor b = spawn_expert_balancer(
    sys, ranks,
    {.role = "decode",
     .rank_kind = "decode_rank",
     .num_ranks = 2,
     .num_logical = 4,
     .expert_bytes = 100,
     .settings = {.policy = "hierarchical", .interval_steps = 0, .redundant_experts = 0},
     .check_period = 1h,
     .move_timeout = 1h});
  rebalance_report report;
  const auto began = std::chrono::steady_clock::now();
  self->request(b, 20s, rebalance_atom::value)
    .receive([&](const rebalance_report& r) { report = r; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(std::chrono::steady_clock::now() - began < 20s);
  // planned (the load is uneven), then failed at the move: rank 1 is named
  CHECK(report.moved_experts > 0);
  CHECK(report.error == "rank 1 could not copy its experts: went down");
  expert_balancer_stats s;
  self->request(b, 5s, stats_atom::value)
    .receive([&](const expert_balancer_stats& x) { s = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(s.failed == 1);
  CHECK(s.rebalances == 0);
  CHECK(s.last_error == report.error);
  // the next rebalance finds the rank restarting (no successor was introduced)
  self->request(b, 20s, rebalance_atom::value)
    .receive([&](const rebalance_report& r) { report = r; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(report.error == "rank 1 is restarting");
  self->send_exit(b, caf::exit_reason::user_shutdown);
  self->send_exit(ranks[0], caf::exit_reason::user_shutdown);
}
