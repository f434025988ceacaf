// tests/policy/test_restart_intensity.cpp
// Restart intensity, hand-worked: what a chaos run does (some actor every 0.3 s, the same one
// about once a second) stays within the defaults; a crash loop (restarts milliseconds apart)
// is refused at the sixth; the window slides.
#include <doctest/doctest.h>

#include <stdexcept>

#include "actors/policy/restart_intensity.hpp"

using namespace moe;
using namespace std::chrono_literals;
using tp = restart_intensity::clock::time_point;

TEST_CASE("restart intensity: 5 restarts within 2 s pass, the 6th escalates") {
  restart_intensity r;
  const tp t0{};
  for (int i = 0; i < 5; ++i)
    CHECK(r.allow(t0 + i * 1ms));
  CHECK_FALSE(r.allow(t0 + 5ms));  // crash-looping
  CHECK(r.num_restarts() == 5);    // the refused one is not counted
  CHECK(r.recent(t0 + 5ms) == 5);
}

TEST_CASE("restart intensity: one restart a second for a minute never escalates") {
  restart_intensity r;
  const tp t0{};
  for (int i = 0; i < 60; ++i)
    CHECK(r.allow(t0 + i * 1000ms));
  CHECK(r.num_restarts() == 60);
  CHECK(r.recent(t0 + 59'000ms) == 2);  // 58 s and 59 s; 57 s is exactly 2 s back and gone
}

TEST_CASE("restart intensity: the window slides, a restart exactly one period back has left it") {
  restart_intensity r({.max_restarts = 2, .period = 1000ms});
  const tp t0{};
  CHECK(r.allow(t0));
  CHECK(r.allow(t0 + 600ms));
  CHECK_FALSE(r.allow(t0 + 999ms));  // t0 and 600 ms are both within 1 s
  CHECK(r.allow(t0 + 1000ms));       // t0 has left: 600 ms and 1000 ms
  CHECK_FALSE(r.allow(t0 + 1500ms));
  CHECK(r.allow(t0 + 1600ms));  // 600 ms has left
  CHECK(r.num_restarts() == 4);
}

TEST_CASE("restart intensity: no restarts allowed, and bad limits") {
  restart_intensity never({.max_restarts = 0, .period = 1000ms});
  CHECK_FALSE(never.allow(tp{}));
  CHECK_THROWS_AS(restart_intensity({.max_restarts = -1, .period = 1000ms}), std::logic_error);
  CHECK_THROWS_AS(restart_intensity({.max_restarts = 1, .period = 0ms}), std::logic_error);
}
