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
