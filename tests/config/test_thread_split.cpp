// tests/config/test_thread_split.cpp
// --threads-per-rank auto: the usable cores split among the ranks, worked by hand, and what this
// machine reports (at least one core, no more than its affinity mask).
#include <doctest/doctest.h>

#include <thread>

#include "config/thread_split.hpp"

using moe::split_threads;

TEST_CASE("thread split: cores shared evenly, the rest to whole roles, decode first") {
  auto check = [](int64_t cores, int64_t p, int64_t d, int64_t want_p, int64_t want_d) {
    CAPTURE(cores);
    CAPTURE(p);
    CAPTURE(d);
    const moe::thread_split s = split_threads(cores, p, d);
    CHECK(s.prefill == want_p);
    CHECK(s.decode == want_d);
    CHECK((s.prefill * p + s.decode * d <= cores || (s.prefill == 1 && s.decode == 1)));
  };
  check(16, 2, 2, 4, 4);  // the GPU host's 16 cores over the default 2P+2D
  check(2, 2, 2, 1, 1);   // more ranks than cores: one each, they share
  check(4, 2, 2, 1, 1);   // exactly one each
  check(7, 1, 2, 3, 2);   // 7 / 3 = 2.33: 2 each, then prefill's one more fits, decode's two do not
  check(9, 1, 2, 3, 3);   // 3 each
  check(10, 1, 2, 4, 3);  // 3 each = 9: decode's two more do not fit, prefill's one does
  check(16, 1, 4, 4, 3);  // 16 / 5 = 3.2: 3 each = 15, prefill takes the last
  check(32, 0, 4, 1, 8);  // decode only
}

TEST_CASE("thread split: weights favour a role") {
  const moe::thread_split s = split_threads(16, 2, 2, 1.0, 3.0);  // 16 / 8 = 2 per weight
  CHECK(s.prefill == 2);
  CHECK(s.decode == 6);
}

TEST_CASE("thread split: this machine's usable cores") {
  const moe::usable_cores c = moe::detect_usable_cores();
  CHECK(c.count >= 1);
  CHECK(c.affinity >= 1);
  CHECK(c.count <= c.affinity);
  CHECK(c.affinity <= static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())));
  moe::topology_config topo;
  topo.threads_per_rank = 3;
  CHECK(moe::threads_per_rank(topo).prefill == 3);
  CHECK(moe::threads_per_rank(topo).decode == 3);
}
