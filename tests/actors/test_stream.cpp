// tests/actors/test_stream.cpp
// The CPU stream runs items in order, off the caller's thread (or inline when synchronous), reports
// failures, drains on exit.
#include <doctest/doctest.h>

#include <sched.h>

#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actors/rank/stream.hpp"

using namespace moe;

TEST_CASE("a stream runs its items in order on its own thread and reports each completion") {
  std::vector<int> order;
  std::promise<void> last;
  std::thread::id worker;
  {
    cpu_stream s("test");
    for (int i = 0; i < 50; ++i)
      s.enqueue(
        [&order, &worker, i] {
          order.push_back(i);
          worker = std::this_thread::get_id();
        },
        [&last, i](const std::string& err) {
          CHECK(err.empty());
          if (i == 49)
            last.set_value();
        });
    last.get_future().wait();
    CHECK(s.num_pending() == 0);
  }
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i)
    CHECK(order[i] == i);
  CHECK(worker != std::this_thread::get_id());
}

TEST_CASE("a failing item reports its error and the stream goes on") {
  std::promise<std::string> failed;
  std::promise<void> after;
  cpu_stream s("test");
  s.enqueue([] { throw std::runtime_error("kernel failed"); },
            [&](const std::string& err) { failed.set_value(err); });
  s.enqueue([] {}, [&](const std::string&) { after.set_value(); });
  CHECK(failed.get_future().get() == "kernel failed");
  after.get_future().wait();
}

TEST_CASE("destroying a stream finishes what was enqueued") {
  int done = 0;
  {
    cpu_stream s("test");
    for (int i = 0; i < 10; ++i)
      s.enqueue([] {}, [&done](const std::string&) { ++done; });
  }
  CHECK(done == 10);
}

TEST_CASE("a synchronous stream runs each item and its completion inside enqueue, on the caller") {
  cpu_stream s("sync", /*synchronous=*/true);
  std::vector<std::string> events;
  const std::thread::id caller = std::this_thread::get_id();
  s.enqueue(
    [&] {
      CHECK(std::this_thread::get_id() == caller);
      events.push_back("work 0");
    },
    [&](const std::string& err) { events.push_back("done 0: " + err); });
  events.push_back("after enqueue 0");
  s.enqueue([] { throw std::runtime_error("bad item"); },
            [&](const std::string& err) { events.push_back("done 1: " + err); });
  s.enqueue([&] { events.push_back("work 2"); }, nullptr);
  CHECK(s.num_pending() == 0);
  CHECK(events ==
        std::vector<std::string>{"work 0", "done 0: ", "after enqueue 0", "done 1: bad item", "work 2"});
}

TEST_CASE("a pinned stream runs its items on the CPU it was given") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  int last_cpu = -1;  // the mask's last CPU: not where a fresh thread would start by chance
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask))
      last_cpu = cpu;
  REQUIRE(last_cpu >= 0);
  std::promise<std::vector<int>> seen;
  {
    cpu_stream s("pinned", false, last_cpu);
    s.enqueue(
      [&seen] {
        std::vector<int> cpus;
        for (int i = 0; i < 20; ++i) {  // where it runs, and again after yielding the core
          cpus.push_back(sched_getcpu());
          std::this_thread::yield();
        }
        seen.set_value(cpus);
      },
      [](const std::string& err) { CHECK(err.empty()); });
  }
  for (int cpu : seen.get_future().get())
    CHECK(cpu == last_cpu);
}
