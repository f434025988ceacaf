// tests/config/test_thread_split.cpp
// --threads-per-rank auto: the usable cores split among the ranks, worked by hand, and what this
// machine reports (at least one core, no more than its affinity mask).
#include <doctest/doctest.h>

#include <algorithm>
#include <thread>
#include <vector>

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

TEST_CASE("pinned threads: ranks take the mask's CPUs in order, and go round when they want more") {
  using cpu_lists = std::vector<std::vector<int>>;
  // 16 CPUs, 4 threads per rank of 2P+2D: four disjoint blocks, prefill ranks first
  std::vector<int> sixteen(16);
  for (int i = 0; i < 16; ++i)
    sixteen[static_cast<size_t>(i)] = i;
  CHECK(moe::assign_cpus(sixteen, 16, {4, 4}, 2, 2) ==
        cpu_lists{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  // a mask with holes (CPUs 2, 5, 7, 8), 1 prefill rank of 1 thread and 1 decode rank of 3
  CHECK(moe::assign_cpus({2, 5, 7, 8}, 4, {1, 3}, 1, 1) == cpu_lists{{2}, {5, 7, 8}});
  // 2 CPUs, 2P+2D of one thread each: the second pair shares with the first
  CHECK(moe::assign_cpus({0, 1}, 2, {1, 1}, 2, 2) == cpu_lists{{0}, {1}, {0}, {1}});
  // a cgroup quota of 2 on a mask of 4: only the first 2 CPUs are used
  CHECK(moe::assign_cpus({0, 1, 2, 3}, 2, {1, 2}, 1, 1) == cpu_lists{{0}, {1, 0}});
  // no readable mask: nothing pinned, one empty list per rank
  CHECK(moe::assign_cpus({}, 4, {2, 2}, 1, 2) == cpu_lists{{}, {}, {}});
}

TEST_CASE("pinned threads: this machine's affinity mask lists its CPUs") {
  const std::vector<int> cpus = moe::affinity_cpus();
  CHECK(static_cast<int64_t>(cpus.size()) == moe::detect_usable_cores().affinity);
  CHECK(std::is_sorted(cpus.begin(), cpus.end()));
}
