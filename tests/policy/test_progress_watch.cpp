// tests/policy/test_progress_watch.cpp
// The watchdog's rule, hand-worked: a rank with running requests (or a step in flight) whose step
// count stays put for the timeout is stuck, as is one that stops answering; an idle rank, or one
// whose steps move, never is; one blocked on its peers is spared for twice the timeout; a
// restarted rank starts afresh.
#include <doctest/doctest.h>

#include "actors/policy/progress_watch.hpp"

using namespace moe;
using namespace std::chrono_literals;
using tp = progress_watch::clock::time_point;

TEST_CASE("progress watch: running requests and no new step for the timeout is a stall") {
  const tp t0{};
  progress_watch w(1000ms, t0);
  CHECK_FALSE(
    w.stalled(progress_sample{.num_running = 2, .num_steps = 7}, t0 + 100ms));  // first sample: progress
  CHECK_FALSE(w.stalled(progress_sample{.num_running = 2, .num_steps = 7}, t0 + 600ms));
  CHECK_FALSE(w.stalled(progress_sample{.num_running = 2, .num_steps = 7}, t0 + 1099ms));
  CHECK(w.stalled(progress_sample{.num_running = 2, .num_steps = 7}, t0 + 1100ms));  // 1000 ms since 100 ms
}

TEST_CASE("progress watch: moving steps or an idle rank never stall, silence does") {
  const tp t0{};
  progress_watch w(1000ms, t0);
  for (int i = 0; i < 20; ++i)  // a step every 500 ms for 10 s
    CHECK_FALSE(w.stalled(progress_sample{.num_running = 1, .num_steps = i}, t0 + i * 500ms));
  for (int i = 20; i < 40; ++i)  // idle, its step count fixed
    CHECK_FALSE(w.stalled(progress_sample{.num_running = 0, .num_steps = 19}, t0 + i * 500ms));
  const tp last = t0 + 39 * 500ms;
  CHECK_FALSE(w.stalled(std::nullopt, last + 999ms));  // no answer, not for long yet
  CHECK(w.stalled(std::nullopt, last + 1000ms));
  w.reset(last + 1000ms);  // restarted
  CHECK_FALSE(w.stalled(std::nullopt, last + 1500ms));
  CHECK_FALSE(w.stalled(progress_sample{.num_running = 3, .num_steps = 0}, last + 1900ms));
  CHECK(w.stalled(progress_sample{.num_running = 3, .num_steps = 0}, last + 2900ms));
}

TEST_CASE("progress watch: a step in flight is work even with no request running") {
  const tp t0{};
  progress_watch w(1000ms, t0);
  const progress_sample in_flight{.num_running = 0, .num_steps = 4, .step_in_flight = true};
  CHECK_FALSE(w.stalled(in_flight, t0));
  CHECK_FALSE(w.stalled(in_flight, t0 + 999ms));
  CHECK(w.stalled(in_flight, t0 + 1000ms));
}

TEST_CASE("progress watch: a rank waiting on its peers is spared for twice the timeout") {
  const tp t0{};
  progress_watch w(1000ms, t0);
  CHECK(w.peer_wait_limit() == 2000ms);
  // blocked inside step 9 from t0 on: samples every 500 ms report the wait so far
  for (int i = 0; i < 4; ++i) {
    const progress_sample waiting{
      .num_running = 2, .num_steps = 9, .step_in_flight = true, .peer_wait_ms = i * 500 + 1};
    CHECK_FALSE(w.stalled(waiting, t0 + i * 500ms));  // 1, 501, 1001 and 1501 ms: spared
  }
  // 2001 ms: past the limit, stuck at once, though the last spared sample was 500 ms ago
  CHECK(
    w.stalled(progress_sample{.num_running = 2, .num_steps = 9, .step_in_flight = true, .peer_wait_ms = 2001},
              t0 + 2000ms));
  // the hung peer was killed: the wait ended, the step was abandoned and re-run (steps moved)
  progress_watch v(1000ms, t0);
  CHECK_FALSE(
    v.stalled(progress_sample{.num_running = 2, .num_steps = 9, .step_in_flight = true, .peer_wait_ms = 1900},
              t0 + 1900ms));
  CHECK_FALSE(
    v.stalled(progress_sample{.num_running = 2, .num_steps = 9, .step_in_flight = true}, t0 + 2400ms));
  CHECK(v.stalled(progress_sample{.num_running = 2, .num_steps = 9, .step_in_flight = true}, t0 + 2900ms));
}
