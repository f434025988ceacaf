// tests/actors/test_watchdog.cpp
// The watchdog over toy ranks under a real supervisor: one that reports running requests and a
// step count that never moves is killed and restarted; one whose steps move, and an idle one,
// are left alone.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "actor_fixture.hpp"
#include "actors/watchdog.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

// Answers (stats_atom) with `running` requests; its step count moves on each answer if `moving`.
child_spec toy_rank(caf::actor_system& sys, std::string kind, int64_t running, bool moving,
                    std::shared_ptr<std::atomic<int64_t>> starts) {
  return {.kind = std::move(kind),
          .index = 0,
          .restart = restart_policy::permanent,
          .running = {},
          .start =
            [&sys, running, moving, starts](const child_lookup&) {
              ++*starts;
              return sys.spawn([running, moving](caf::event_based_actor*) -> caf::behavior {
                auto steps = std::make_shared<int64_t>(0);
                return {[=](stats_atom) {
                  if (moving)
                    ++*steps;
                  return rank_stats{
                    .num_running = running, .num_blocks = 8, .num_free_blocks = 8, .num_steps = *steps};
                }};
              });
            },
          .introduce = {}};
}

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "the watchdog kills a rank that makes no progress, and only that one") {
  auto stuck = std::make_shared<std::atomic<int64_t>>(0);
  auto busy = std::make_shared<std::atomic<int64_t>>(0);
  auto idle = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys,
                              {toy_rank(sys, "stuck", 2, false, stuck), toy_rank(sys, "busy", 2, true, busy),
                               toy_rank(sys, "idle", 0, false, idle)});
  auto dog = spawn_watchdog(
    sys, sup, {.watched = {{"stuck", 0}, {"busy", 0}, {"idle", 0}}, .period = 50ms, .stall_timeout = 1s});
  // (a stall timeout of 200 ms was too short under ASan on 2 loaded cores: a toy rank's answer
  // took longer, and the idle and busy ones were killed as not answering)
  std::map<std::string, int64_t> restarts;
  for (int tries = 0; tries < 1000 && restarts["stuck"] < 2; ++tries) {  // 20 s at most
    self->request(sup, 5s, actors_atom::value)
      .receive(
        [&](const std::vector<actor_info>& actors) {
          for (const actor_info& a : actors)
            restarts[a.kind] = a.restarts;
        },
        [&](caf::error& e) { FAIL(sys.render(e)); });
    std::this_thread::sleep_for(20ms);  // the watchdog's own pace is what is under test
  }
  CHECK(restarts["stuck"] >= 2);  // and its successor, stuck as well, again
  CHECK(restarts["busy"] == 0);
  CHECK(restarts["idle"] == 0);
  CHECK(*busy == 1);
  CHECK(*idle == 1);
  self->monitor(dog);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);  // it quits with the supervisor
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(5s) >> [] {});
  CHECK(down);
}
