// tests/cpu/test_fast_thread_pool.cpp
// The fast path's thread pool: every task runs exactly once per call, on a valid thread index,
// across many back-to-back calls (workers spinning) and after idle gaps (workers asleep).
#include <doctest/doctest.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

using namespace moe;

TEST_CASE("fast: thread_pool runs each task exactly once per call") {
  for (int threads : {1, 2, 3, 8}) {
    thread_pool pool(threads);
    CHECK(pool.size() == threads);
    std::vector<std::atomic<int>> hits(1000);
    for (int round = 0; round < 300; ++round) {
      const int64_t n = (round * 37) % 1000 + 1;  // 1 .. 1000 tasks, including a single one
      std::atomic<bool> bad_thread{false};
      pool.parallel_for(n, [&](int64_t task, int thread) {
        hits[task].fetch_add(1, std::memory_order_relaxed);
        if (thread < 0 || thread >= threads)
          bad_thread = true;
      });
      CHECK_FALSE(bad_thread.load());
      int64_t wrong = 0;
      for (int64_t t = 0; t < 1000; ++t) {
        wrong += hits[t].load() != (t < n ? 1 : 0);
        hits[t] = 0;
      }
      CHECK(wrong == 0);
      if (round % 100 == 99)  // let the workers fall asleep
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

TEST_CASE("fast: thread_pool with 0 threads uses every hardware thread") {
  thread_pool pool(0);
  CHECK(pool.size() == static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t task, int) { sum += task; });
  CHECK(sum.load() == 4950);
}

TEST_CASE("fast: a pinned pool's workers run on their CPUs") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask))
      cpus.push_back(cpu);
  REQUIRE(!cpus.empty());
  // worker i pins to cpus[i % size]: three threads over the mask's last CPU and its first
  const std::vector<int> given{cpus.front(), cpus.back(), cpus.front()};
  thread_pool pool(3, given);
  std::atomic<int> wrong{0}, by_workers{0};
  for (int round = 0; round < 2000 && by_workers.load() < 50; ++round)
    pool.parallel_for(64, [&](int64_t, int thread) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // room for the workers to claim
      if (thread == 0)
        return;  // the caller's thread: not the pool's to pin
      by_workers.fetch_add(1);
      if (sched_getcpu() != given[static_cast<size_t>(thread)])
        wrong.fetch_add(1);
    });
  CHECK(by_workers.load() > 0);
  CHECK(wrong.load() == 0);
}
