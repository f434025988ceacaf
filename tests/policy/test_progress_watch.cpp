// tests/policy/test_progress_watch.cpp
// The watchdog's rule, hand-worked: a rank with running requests whose step count stays put for
// the timeout is stuck, as is one that stops answering; an idle rank, or one whose steps move,
// never is; a restarted rank starts afresh.
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

TEST_CASE("progress watch: moving steps or an idle rank never stall; silence does") {
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
