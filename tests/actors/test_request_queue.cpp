// tests/actors/test_request_queue.cpp
// Admission: ids in order, at most max_running downstream, "overloaded" at once when full.
#include <doctest/doctest.h>

#include <chrono>

#include "actors/request_queue.hpp"
#include "actor_fixture.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

request_spec spec_of(int32_t first_token) { return {.prompt_ids = {first_token}, .sampling = {}}; }

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture, "the queue admits, bounds and hands requests downstream in order") {
  // The scoped actor plays downstream: it receives what the queue hands on.
  auto queue = spawn_request_queue(sys, {.max_queued = 2, .max_running = 1},
                                   caf::actor_cast<caf::actor>(self));
  std::vector<uint64_t> ids;
  caf::error rejected;
  for (int32_t i = 0; i < 4; ++i)  // 1 runs, 2 wait, the 4th is refused
    self->request(queue, 1s, submit_atom::value, spec_of(i))
      .receive([&](uint64_t id) { ids.push_back(id); }, [&](caf::error& e) { rejected = e; });
  CHECK(ids == std::vector<uint64_t>{1, 2, 3});
  CHECK(rejected == serve_errc::overloaded);

  auto expect_downstream = [&](uint64_t want_id, int32_t want_token) {
    bool got = false;
    self->receive(
      [&](submit_atom, uint64_t id, const request_spec& s, const caf::actor& client, const resume_state&) {
        CHECK(client == caf::actor_cast<caf::actor>(self));  // who submitted it
        CHECK(id == want_id);
        CHECK(s.prompt_ids == std::vector<int32_t>{want_token});
        got = true;
      },
      caf::after(1s) >> [] {});
    CHECK(got);
  };
  expect_downstream(1, 0);
  self->send(queue, done_atom::value, uint64_t{1});
  expect_downstream(2, 1);
  self->send(queue, done_atom::value, uint64_t{7});  // unknown id: ignored
  self->send(queue, done_atom::value, uint64_t{2});
  expect_downstream(3, 2);

  self->request(queue, 1s, stats_atom::value)
    .receive(
      [&](const queue_stats& s) {
        CHECK(s.num_admitted == 3);
        CHECK(s.num_rejected == 1);
        CHECK(s.num_running == 1);
        CHECK(s.num_queued == 0);
      },
      [&](caf::error& e) { FAIL(sys.render(e)); });
  self->send_exit(queue, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "a restarted queue rebuilds its running set and takes requests back") {
  // The scoped actor plays downstream (the prefill balancer) and the client.
  constexpr uint64_t first_id = (uint64_t{1} << 40) + 1;
  auto queue = spawn_request_queue(sys,
                                   {.max_queued = 2, .max_running = 2, .first_id = first_id, .rebuild = true},
                                   caf::actor_cast<caf::actor>(self));
  // it asks downstream first: request 5 runs there
  bool asked = false;
  self->receive(
    [&](bookings_atom) {
      asked = true;
      return std::vector<uint64_t>{5};
    },
    caf::after(5s) >> [] {});
  REQUIRE(asked);
  resume_state restarted;
  restarted.queue_restarted = true;
  self->send(queue, resume_atom::value, uint64_t{5}, spec_of(50), restarted);  // runs: stays there
  self->send(queue, resume_atom::value, uint64_t{6}, spec_of(60), restarted);  // it waited: runs now
  self->send(queue, resume_atom::value, uint64_t{7}, spec_of(70), restarted);  // no slot: waits
  resume_state lost;
  lost.lost_session = caf::actor_cast<caf::actor>(self).address();
  lost.generation = 1;
  lost.output_ids = {3, 4};
  self->send(queue, resume_atom::value, uint64_t{5}, spec_of(51), lost);  // its session died: again, at once

  std::vector<std::pair<uint64_t, resume_state>> handed;
  auto take_downstream = [&] {
    self->receive(
      [&](submit_atom, uint64_t id, const request_spec&, const caf::actor& client, const resume_state& r) {
        CHECK(client == caf::actor_cast<caf::actor>(self));
        handed.emplace_back(id, r);
      },
      caf::after(5s) >> [] {});
  };
  take_downstream();
  take_downstream();
  REQUIRE(handed.size() == 2);
  CHECK(handed[0].first == 6);
  CHECK(handed[0].second.queue_restarted);
  CHECK(handed[1].first == 5);
  CHECK(handed[1].second.output_ids == std::vector<int32_t>{3, 4});
  CHECK(handed[1].second.generation == 1);

  // admission goes on, with ids above the old ones
  uint64_t id = 0;
  self->request(queue, 1s, submit_atom::value, spec_of(80))
    .receive([&](uint64_t x) { id = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(id == first_id);
  self->request(queue, 1s, stats_atom::value)
    .receive(
      [&](const queue_stats& s) {
        CHECK(s.num_running == 2);
        CHECK(s.num_queued == 2);
      },
      [&](caf::error& e) { FAIL(sys.render(e)); });
  self->send(queue, done_atom::value, uint64_t{6});
  take_downstream();
  REQUIRE(handed.size() == 3);
  CHECK(handed[2].first == 7);  // taken back ahead of the new one
  self->send_exit(queue, caf::exit_reason::user_shutdown);
}
