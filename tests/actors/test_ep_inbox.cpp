// tests/actors/test_ep_inbox.cpp
// A rank's inbox: payloads come in any order and leave in source-rank order, only when all are
// there; a wait returns once the last payload is there and its link time has passed; a payload
// for a step the rank has not begun tells the sender to wake the owner; cancel frees waiters;
// a wait blocked on peers reports for how long.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "actors/rank/ep_inbox.hpp"

using namespace moe;

namespace {

std::shared_ptr<const ep_dispatch> dispatch(int64_t step, int64_t layer, int64_t mb, int64_t src) {
  return std::make_shared<const ep_dispatch>(
    ep_dispatch{.key = {.step = step, .layer_idx = layer, .micro_batch = mb}, .src_rank = src});
}

std::shared_ptr<const ep_combine> combine(int64_t step, int64_t layer, int64_t mb, int64_t src) {
  return std::make_shared<const ep_combine>(
    ep_combine{.key = {.step = step, .layer_idx = layer, .micro_batch = mb}, .src_rank = src});
}

}  // namespace

TEST_CASE("inbox: payloads of one key leave together, by source rank, and only when all are here") {
  ep_inbox box;
  box.begin_step(3);
  const auto now = ep_inbox::clock::now();
  const ep_key key{.step = 3, .layer_idx = 1, .micro_batch = 1};
  const stage_input in{.kind = ep_payload::dispatch, .key = key, .count = 3};
  CHECK_FALSE(box.put(dispatch(3, 1, 1, 2), now));
  CHECK_FALSE(box.put(dispatch(3, 1, 0, 1), now));  // another micro-batch
  CHECK_FALSE(box.put(dispatch(3, 2, 1, 1), now));  // another layer
  CHECK_FALSE(box.put(combine(3, 1, 1, 0), now));   // a combine of the same key
  CHECK_FALSE(box.put(dispatch(3, 1, 1, 0), now));
  CHECK_FALSE(box.complete(in));
  CHECK_THROWS_AS((void)box.take_dispatches(key, 3), std::logic_error);
  CHECK_FALSE(box.put(dispatch(3, 1, 1, 1), now));
  REQUIRE(box.complete(in));
  CHECK_FALSE(box.complete({.kind = ep_payload::combine, .key = key, .count = 3}));
  box.wait(in);  // all here, arrived: no wait
  const auto got = box.take_dispatches(key, 3);
  REQUIRE(got.size() == 3);
  for (int64_t r = 0; r < 3; ++r) {
    CHECK(got[r]->src_rank == r);
    CHECK(got[r]->key == key);
  }
  CHECK_FALSE(box.complete(in));  // taken
  CHECK(box.take_combines(key, 1).at(0)->src_rank == 0);
  CHECK(box.take_dispatches({.step = 3, .layer_idx = 1, .micro_batch = 0}, 1).size() == 1);
}

TEST_CASE("inbox: a payload for a step not begun here asks for the owner, has_step sees it") {
  ep_inbox box;
  const auto now = ep_inbox::clock::now();
  CHECK(box.put(dispatch(0, 1, 0, 1), now));  // step 0 not begun
  CHECK(box.has_step(0));
  CHECK_FALSE(box.has_step(1));
  box.begin_step(0);
  CHECK_FALSE(box.put(dispatch(0, 1, 1, 1), now));
  CHECK(box.put(dispatch(1, 1, 0, 1), now));  // the next step, not begun
  CHECK(box.has_step(1));
  CHECK_FALSE(box.has_step(2));
  (void)box.take_dispatches({.step = 1, .layer_idx = 1, .micro_batch = 0}, 1);
  CHECK_FALSE(box.has_step(1));
}

TEST_CASE("inbox: a wait ends when the last payload is here and its link time has passed") {
  ep_inbox box;
  box.begin_step(0);
  const ep_key key{.step = 0, .layer_idx = 0, .micro_batch = 0};
  const auto start = ep_inbox::clock::now();
  const auto late = start + std::chrono::milliseconds(30);
  (void)box.put(combine(0, 0, 0, 0), start);
  std::atomic<bool> second_put{false};
  std::atomic<bool> waited{false};
  ep_inbox::clock::time_point woke;
  std::thread waiter([&] {
    box.wait({.kind = ep_payload::combine, .key = key, .count = 2});
    woke = ep_inbox::clock::now();
    CHECK(second_put.load());  // not before the last payload
    waited = true;
  });
  CHECK_FALSE(waited.load());
  second_put = true;
  (void)box.put(combine(0, 0, 0, 1), late);  // on the link for 30 ms
  waiter.join();
  CHECK(waited.load());
  CHECK(woke >= late);  // not before it arrived
  CHECK(box.take_combines(key, 2).size() == 2);
}

TEST_CASE("inbox: cancel wakes a waiter with an error and drops what comes after") {
  ep_inbox box;
  const stage_input in{.kind = ep_payload::dispatch, .key = {}, .count = 2};
  (void)box.put(dispatch(0, 0, 0, 0), ep_inbox::clock::now());
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    try {
      box.wait(in);
    } catch (const std::runtime_error&) {
      threw = true;
    }
  });
  box.cancel();
  waiter.join();
  CHECK(threw.load());
  CHECK(box.cancelled());
  CHECK_FALSE(box.put(dispatch(5, 0, 0, 1), ep_inbox::clock::now()));  // dropped, even a new step
  CHECK_FALSE(box.has_step(5));
  CHECK_FALSE(box.complete(in));
  CHECK_THROWS_AS(box.wait(in), std::runtime_error);
}

TEST_CASE("inbox: it tells how long a wait has been blocked on peers, and nothing once it ends") {
  using namespace std::chrono_literals;
  ep_inbox box;
  const stage_input in{.kind = ep_payload::dispatch, .key = {}, .count = 1};
  CHECK(box.waiting_for(ep_inbox::clock::now()) == ep_inbox::clock::duration::zero());
  std::atomic<bool> returned{false};
  const auto before = ep_inbox::clock::now();
  std::thread waiter([&] {
    box.wait(in);
    returned = true;
  });
  // the waiter blocks: its wait shows, measured from when it began
  while (box.waiting_for(ep_inbox::clock::now()) == ep_inbox::clock::duration::zero())
    std::this_thread::yield();
  const auto later = ep_inbox::clock::now() + 50ms;
  CHECK(box.waiting_for(later) >= 50ms);
  CHECK(box.waiting_for(later) <= later - before);
  CHECK_FALSE(returned.load());
  (void)box.put(dispatch(0, 0, 0, 0), ep_inbox::clock::now());
  waiter.join();
  CHECK(returned.load());
  CHECK(box.waiting_for(ep_inbox::clock::now() + 1s) == ep_inbox::clock::duration::zero());
  // a wait whose payloads are already here never counts as blocked
  (void)box.put(dispatch(0, 1, 0, 0), ep_inbox::clock::now());
  box.wait({.kind = ep_payload::dispatch, .key = {.step = 0, .layer_idx = 1, .micro_batch = 0}, .count = 1});
  CHECK(box.waiting_for(ep_inbox::clock::now()) == ep_inbox::clock::duration::zero());
}

TEST_CASE("inbox: a hung stream is held until the rank stops, and is not a wait on peers") {
  ep_inbox box;
  std::atomic<bool> released{false};
  std::thread hung([&] {
    box.hang_until_cancelled();
    released = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(released.load());
  CHECK(box.waiting_for(ep_inbox::clock::now()) == ep_inbox::clock::duration::zero());
  box.cancel();
  hung.join();
  CHECK(released.load());
}
