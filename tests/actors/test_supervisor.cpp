// tests/actors/test_supervisor.cpp
// The supervisor over toy children: a killed child is restarted and re-introduced with its new
// handle; a crash-looping one escalates and stops the others; a child that cannot be restarted
// stops everything when it dies; a transient child's normal exit ends it; stopping the
// supervisor stops its children. Children added while it runs are supervised alike; attached
// actors are listed and killable, and forgotten when they die.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>

#include "actor_fixture.hpp"
#include "actors/supervisor.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

// Answers (stats_atom) with its generation: which start made it.
caf::behavior toy(caf::event_based_actor*, int64_t generation) {
  return {[=](stats_atom) { return generation; }};
}

// A child spec whose every start counts up `starts` and spawns toy(generation).
child_spec toy_spec(caf::actor_system& sys, std::string kind, restart_policy restart,
                    std::shared_ptr<std::atomic<int64_t>> starts) {
  return {.kind = std::move(kind),
          .index = 0,
          .restart = restart,
          .running = {},
          .start = [&sys, starts](const child_lookup&) { return sys.spawn(toy, starts->fetch_add(1)); },
          .introduce = {}};
}

struct supervisor_case : testing::actor_fixture {
  // Asks the supervisor; fails the test on an error.
  template <class T, class... Ts>
  T ask(const supervisor_actor& sup, Ts... xs) {
    T out{};
    self->request(sup, 5s, xs...)
      .receive([&](T& x) { out = std::move(x); }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return out;
  }

  int64_t generation_of(const caf::actor& a) {
    int64_t g = -1;
    self->request(a, 5s, stats_atom::value).receive([&](int64_t x) { g = x; }, [&](caf::error&) {});
    return g;
  }

  std::map<caf::actor_addr, std::string> downs;  // down_msgs received, by source

  // Waits for the down_msg of `a` (monitored before); its reason, or "timeout".
  std::string wait_down(const caf::actor& a) {
    bool timed_out = false;
    while (downs.count(a.address()) == 0 && !timed_out)
      self->receive([&](caf::down_msg& dm) { downs[dm.source] = sys.render(dm.reason); },
                    caf::after(10s) >> [&] { timed_out = true; });
    return timed_out ? "timeout" : downs[a.address()];
  }

  // Asks until the lookup gives a handle other than `old` (the restart is asynchronous).
  caf::actor wait_replaced(const supervisor_actor& sup, const std::string& kind, const caf::actor& old) {
    for (int tries = 0; tries < 10'000; ++tries) {
      caf::actor now = ask<caf::actor>(sup, lookup_atom::value, kind, int64_t{0});
      if (now && now != old)
        return now;
    }
    return {};
  }
};

}  // namespace

TEST_CASE_FIXTURE(supervisor_case, "supervisor: a killed child is restarted and re-introduced") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto introduced = std::make_shared<std::atomic<int64_t>>(0);
  child_spec spec = toy_spec(sys, "toy", restart_policy::permanent, starts);
  const caf::actor client = caf::actor_cast<caf::actor>(self);
  spec.introduce = [introduced, client](const caf::actor& fresh, const child_lookup& current) {
    ++*introduced;
    CHECK(current("toy", 0) == fresh);  // the lookup already gives the new handle
    caf::anon_send(client, route_atom::value, fresh);
  };
  auto sup = spawn_supervisor(sys, {spec});
  const caf::actor first = ask<caf::actor>(sup, lookup_atom::value, std::string("toy"), int64_t{0});
  REQUIRE(first);
  CHECK(generation_of(first) == 0);
  CHECK(*introduced == 0);  // not at the first start
  CHECK(ask<bool>(sup, kill_atom::value, std::string("toy"), int64_t{0}));
  CHECK_FALSE(ask<bool>(sup, kill_atom::value, std::string("nobody"), int64_t{0}));
  caf::actor fresh;
  self->receive([&](route_atom, caf::actor& a) { fresh = a; }, caf::after(10s) >> [] {});
  REQUIRE(fresh);
  CHECK(fresh != first);
  CHECK(generation_of(fresh) == 1);
  CHECK(*introduced == 1);
  const auto listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].kind == "toy");
  CHECK(listed[0].restarts == 1);
  self->monitor(fresh);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);  // stopping it stops the child
  CHECK(wait_down(fresh) != "timeout");
}

TEST_CASE_FIXTURE(supervisor_case, "supervisor: a crash-looping child escalates and stops the others") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto other_starts = std::make_shared<std::atomic<int64_t>>(0);
  child_spec looping{.kind = "looping",
                     .index = 0,
                     .restart = restart_policy::permanent,
                     .running = {},
                     .start =
                       [this, starts](const child_lookup&) {
                         ++*starts;
                         return sys.spawn([](caf::event_based_actor* a) -> caf::behavior {
                           a->quit(caf::make_error(serve_errc::invalid, "crash at start"));
                           return {};
                         });
                       },
                     .introduce = {}};
  std::vector<child_spec> specs = {toy_spec(sys, "bystander", restart_policy::permanent, other_starts),
                                   looping};
  auto sup = spawn_supervisor(sys, specs, {.max_restarts = 3, .period = 60s});
  self->monitor(sup);
  const std::string reason = wait_down(caf::actor_cast<caf::actor>(sup));
  CHECK(reason.find("crash_loop") != std::string::npos);
  CHECK(reason.find("looping") != std::string::npos);
  CHECK(*starts == 4);  // the first start and 3 restarts; the 4th death escalates
  CHECK(*other_starts == 1);
}

TEST_CASE_FIXTURE(supervisor_case, "supervisor: a child that cannot be restarted stops everything") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys, {toy_spec(sys, "fixed", restart_policy::never, starts),
                                    toy_spec(sys, "other", restart_policy::permanent, starts)});
  const caf::actor other = ask<caf::actor>(sup, lookup_atom::value, std::string("other"), int64_t{0});
  self->monitor(other);
  self->monitor(sup);
  CHECK(ask<bool>(sup, kill_atom::value, std::string("fixed"), int64_t{0}));
  CHECK(wait_down(other) != "timeout");
  CHECK(wait_down(caf::actor_cast<caf::actor>(sup)).find("kill") != std::string::npos);
  CHECK(*starts == 2);
}

TEST_CASE_FIXTURE(supervisor_case,
                  "supervisor: a transient child's normal exit ends it, an abnormal one restarts it") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys, {toy_spec(sys, "transient", restart_policy::transient, starts)});
  caf::actor first = ask<caf::actor>(sup, lookup_atom::value, std::string("transient"), int64_t{0});
  caf::anon_send_exit(first, caf::exit_reason::unhandled_exception);  // as a crash
  const caf::actor second = wait_replaced(sup, "transient", first);
  REQUIRE(second);
  CHECK(generation_of(second) == 1);
  self->monitor(second);
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);  // a normal end
  CHECK(wait_down(second) != "timeout");
  bool gone = false;
  for (int tries = 0; tries < 10'000 && !gone; ++tries)
    gone = ask<std::vector<actor_info>>(sup, actors_atom::value).empty();
  CHECK(gone);
  CHECK(*starts == 2);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(supervisor_case,
                  "supervisor: a successor lookup waits for the restart, an ended child has none") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys, {toy_spec(sys, "toy", restart_policy::permanent, starts),
                                    toy_spec(sys, "once", restart_policy::transient, starts)});
  const caf::actor first = ask<caf::actor>(sup, lookup_atom::value, std::string("toy"), int64_t{0});
  // asked while `first` still lives: the answer is its successor, once there is one
  const caf::actor client = caf::actor_cast<caf::actor>(self);
  sys.spawn([sup, client, lost = first.address()](caf::event_based_actor* a) {
    a->request(sup, 10s, lookup_atom::value, std::string("toy"), int64_t{0}, lost)
      .then([a, client](caf::actor& next) { a->send(client, route_atom::value, next); },
            [a, client](caf::error&) { a->send(client, route_atom::value, caf::actor{}); });
  });
  CHECK(ask<bool>(sup, kill_atom::value, std::string("toy"), int64_t{0}));
  caf::actor successor;
  self->receive([&](route_atom, caf::actor& a) { successor = std::move(a); }, caf::after(10s) >> [] {});
  REQUIRE(successor);
  CHECK(successor != first);
  CHECK(generation_of(successor) == 2);  // "once" was start 1
  // asked for another instance than the one that lives: that one, at once
  CHECK(ask<caf::actor>(sup, lookup_atom::value, std::string("toy"), int64_t{0}, first.address()) ==
        successor);

  const caf::actor once = ask<caf::actor>(sup, lookup_atom::value, std::string("once"), int64_t{0});
  self->monitor(once);
  caf::anon_send_exit(once, caf::exit_reason::user_shutdown);  // a normal end: not restarted
  CHECK(wait_down(once) != "timeout");
  caf::error none;
  for (int tries = 0; tries < 10'000 && !none; ++tries)
    self->request(sup, 5s, lookup_atom::value, std::string("once"), int64_t{0}, once.address())
      .receive([](caf::actor&) {}, [&](caf::error& e) { none = e; });
  CHECK(none == serve_errc::unavailable);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(supervisor_case, "supervisor: a child's workers are listed and killed through it") {
  auto killed = std::make_shared<std::atomic<int64_t>>(0);
  child_spec owner{.kind = "owner",
                   .index = 0,
                   .restart = restart_policy::permanent,
                   .running = {},
                   .start =
                     [this, killed](const child_lookup&) {
                       // typed, as the prefill balancer: the answer's type is checked
                       using owner_actor =
                         caf::typed_actor<caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
                                          caf::replies_to<kill_atom, uint64_t>::with<bool>>;
                       return caf::actor_cast<caf::actor>(
                         sys.spawn([killed](owner_actor::pointer) -> owner_actor::behavior_type {
                           return {
                             [](actors_atom) {  // the owner names them; the supervisor, the kind
                               return std::vector<actor_info>{{.kind = "?", .index = 7, .restarts = 0},
                                                              {.kind = "?", .index = 9, .restarts = 2}};
                             },
                             [killed](kill_atom, uint64_t id) {
                               if (id != 7 && id != 9)
                                 return false;
                               *killed = static_cast<int64_t>(id);
                               return true;
                             },
                           };
                         }));
                     },
                   .introduce = {},
                   .worker_kind = "worker"};
  auto sup = spawn_supervisor(sys, {owner});
  const auto listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].kind == "owner");
  CHECK(listed[1].kind == "worker");
  CHECK(listed[1].index == 7);
  CHECK(listed[2].kind == "worker");
  CHECK(listed[2].index == 9);
  CHECK(listed[2].restarts == 2);
  CHECK(ask<bool>(sup, kill_atom::value, std::string("worker"), int64_t{9}));
  CHECK(*killed == 9);
  CHECK_FALSE(ask<bool>(sup, kill_atom::value, std::string("worker"), int64_t{3}));
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(supervisor_case, "supervisor: a child added while it runs is supervised like the others") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys, {toy_spec(sys, "toy", restart_policy::permanent, starts)});
  auto added_starts = std::make_shared<std::atomic<int64_t>>(100);
  const caf::actor added = ask<caf::actor>(sup, start_atom::value,
                                           toy_spec(sys, "added", restart_policy::transient, added_starts));
  REQUIRE(added);
  CHECK(generation_of(added) == 100);
  CHECK(ask<caf::actor>(sup, lookup_atom::value, std::string("added"), int64_t{0}) == added);
  // one of the same kind and index that lives is refused
  self->request(sup, 5s, start_atom::value, toy_spec(sys, "added", restart_policy::transient, added_starts))
    .receive([](const caf::actor&) { FAIL("a second child under the same name"); },
             [&](caf::error& e) { CHECK(sys.render(e).find("lives") != std::string::npos); });
  CHECK(ask<bool>(sup, kill_atom::value, std::string("added"), int64_t{0}));  // a crash: restarted
  const caf::actor fresh = wait_replaced(sup, "added", added);
  REQUIRE(fresh);
  CHECK(generation_of(fresh) == 101);
  self->monitor(fresh);
  caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);  // transient: a normal exit ends it
  CHECK(wait_down(fresh) != "timeout");
  std::vector<actor_info> listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  for (int tries = 0; tries < 1000 && listed.size() != 1; ++tries)  // its down_msg may be on the way
    listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].kind == "toy");
  // an ended one may be added again
  const caf::actor again = ask<caf::actor>(sup, start_atom::value,
                                           toy_spec(sys, "added", restart_policy::transient, added_starts));
  CHECK(generation_of(again) == 102);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(supervisor_case, "supervisor: attached actors are listed and killed, never restarted") {
  auto starts = std::make_shared<std::atomic<int64_t>>(0);
  auto sup = spawn_supervisor(sys, {toy_spec(sys, "toy", restart_policy::permanent, starts)});
  const caf::actor a = sys.spawn(toy, int64_t{7});
  const caf::actor b = sys.spawn(toy, int64_t{8});
  caf::anon_send(sup, attach_atom::value, std::string("bridge"), a);
  caf::anon_send(sup, attach_atom::value, std::string("bridge"), b);
  std::vector<actor_info> listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  REQUIRE(listed.size() == 3);
  CHECK(listed[1].kind == "bridge");
  CHECK(listed[1].index == 0);
  CHECK(listed[2].index == 1);
  self->monitor(b);
  CHECK(ask<bool>(sup, kill_atom::value, std::string("bridge"), int64_t{1}));
  CHECK(wait_down(b).find("kill") != std::string::npos);
  CHECK(generation_of(a) == 7);                                     // the other lives on
  for (int tries = 0; tries < 1000 && listed.size() != 2; ++tries)  // forgotten, not restarted
    listed = ask<std::vector<actor_info>>(sup, actors_atom::value);
  REQUIRE(listed.size() == 2);
  CHECK(listed[1].index == 0);
  CHECK(*starts == 1);  // the toy was not touched
  self->monitor(a);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);  // its owner stops it, not the supervisor
  CHECK(generation_of(a) == 7);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  CHECK(wait_down(a) != "timeout");
}
