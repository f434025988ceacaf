// tests/actors/test_collective_channel.cpp
// The NCCL path's policy, over a transport in one process (loopback_collective.hpp): a rank's
// sends become rounds only when every peer in another process has its payload; rounds of three
// ranks that stage at their own pace arrive whole and in order, from every peer; a close ends a
// round that a dead peer never enters; a failed join is reported once. The NCCL engine itself
// runs where a GPU exists (tests/cuda/test_nccl_transport.cpp).
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "actors/rank/collective_channel.hpp"
#include "eventually.hpp"
#include "loopback_collective.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<char>& b) { return {b.begin(), b.end()}; }

// What one rank was given: (kind, key, from, text), in delivery order.
struct arrivals {
  std::mutex mutex;
  std::vector<std::tuple<ep_payload, ep_key, int64_t, std::string>> got;
  size_t size() {
    std::lock_guard lock{mutex};
    return got.size();
  }
};

std::string payload_text(ep_payload kind, const ep_key& k, int64_t from, int64_t to) {
  return std::string(kind == ep_payload::dispatch ? "dispatch" : "combine") + " step " +
         std::to_string(k.step) + " layer " + std::to_string(k.layer_idx) + " from " + std::to_string(from) +
         " to " + std::to_string(to);
}

// An engine whose join fails, as NCCL's does for a device another rank of the group holds.
class failing_engine final : public exchange_engine {
 public:
  bool join(const std::vector<char>&) override { throw std::runtime_error("Duplicate GPU detected"); }
  bool exchange(const std::vector<std::vector<char>>&, std::vector<std::vector<char>>&) override {
    return false;
  }
  void abort() override {}
};

}  // namespace

TEST_CASE("collective rounds: a round is ready when every peer in another process has its payload") {
  // rank 1 of 4: ranks 0 and 2 in other processes, rank 3 in its own
  round_book book(1, {true, false, true, false});
  CHECK(book.num_remote() == 2);
  const ep_key k{.step = 7, .layer_idx = 3, .micro_batch = 1};
  CHECK_FALSE(book.stage(ep_payload::dispatch, k, 0, bytes_of("a")));
  CHECK_FALSE(book.stage(ep_payload::combine, k, 2, bytes_of("c")));  // another round: same key, other kind
  CHECK(book.open_rounds() == 2);
  const std::optional<exchange_round> round = book.stage(ep_payload::dispatch, k, 2, bytes_of("b"));
  REQUIRE(round);
  CHECK(round->kind == ep_payload::dispatch);
  CHECK(round->key == k);
  REQUIRE(round->to.size() == 4);
  CHECK(text_of(round->to[0]) == "a");
  CHECK(round->to[1].empty());
  CHECK(text_of(round->to[2]) == "b");
  CHECK(round->to[3].empty());
  CHECK(book.open_rounds() == 1);
  // a peer in this process, itself, or a second payload for one peer would break the lockstep
  CHECK_THROWS_AS((void)book.stage(ep_payload::dispatch, k, 3, bytes_of("x")), std::logic_error);
  CHECK_THROWS_AS((void)book.stage(ep_payload::dispatch, k, 1, bytes_of("x")), std::logic_error);
  CHECK_THROWS_AS((void)book.stage(ep_payload::combine, k, 2, bytes_of("again")), std::logic_error);
  CHECK_THROWS_AS((void)book.stage(ep_payload::combine, k, 9, bytes_of("x")), std::logic_error);
  CHECK_THROWS_AS(round_book(1, {true, true}), std::invalid_argument);  // itself remote
  CHECK_THROWS_AS(round_book(2, {true, false}), std::invalid_argument);
}

TEST_CASE("collective channel: three ranks' rounds arrive whole, from every peer, in the order staged") {
  testing::loopback_transport transport;
  constexpr int64_t n = 3, steps = 4, layers = 3;
  const std::vector<bool> all_remote[n] = {{false, true, true}, {true, false, true}, {true, true, false}};
  std::vector<arrivals> got(n);
  std::vector<std::unique_ptr<collective_channel>> channels;
  std::vector<std::string> failures(n);
  for (int64_t r = 0; r < n; ++r)
    channels.push_back(std::make_unique<collective_channel>(
      round_book(r, all_remote[r]), transport.engine(r, r, all_remote[r]),
      [&got, r](ep_payload kind, const ep_key& key, int64_t from, const std::vector<char>& b) {
        std::lock_guard lock{got[r].mutex};
        got[r].got.emplace_back(kind, key, from, text_of(b));
      },
      [&failures, r](const std::string& why) { failures[r] = why; }));
  const std::vector<char> id = transport.make_id();
  channels[0]->start(id);
  channels[1]->start(id);
  // each rank stages its stream program at its own pace: dispatches to every peer, then combines
  std::vector<std::thread> streams;
  for (int64_t r = 0; r < n; ++r)
    streams.emplace_back([&, r] {
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t l = 0; l < layers; ++l)
          for (const ep_payload kind : {ep_payload::dispatch, ep_payload::combine}) {
            const ep_key k{.step = s, .layer_idx = l, .micro_batch = 0};
            for (int64_t d = n - 1; d >= 0; --d)  // any order within a round
              if (d != r)
                channels[r]->stage(kind, k, d, bytes_of(payload_text(kind, k, r, d)));
            if (r == 1)
              std::this_thread::sleep_for(1ms);  // one rank slower than the others
          }
    });
  for (std::thread& t : streams)
    t.join();
  channels[2]->start(id);  // the last joins after every round was staged: they waited for it
  const size_t expected = steps * layers * 2 * (n - 1);
  REQUIRE(testing::eventually(
    [&] { return got[0].size() == expected && got[1].size() == expected && got[2].size() == expected; },
    10s));
  for (int64_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(failures[r].empty());
    size_t i = 0;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t l = 0; l < layers; ++l)
        for (const ep_payload kind : {ep_payload::dispatch, ep_payload::combine})
          for (int64_t from = 0; from < n; ++from) {  // a round's arrivals by source rank
            if (from == r)
              continue;
            const ep_key k{.step = s, .layer_idx = l, .micro_batch = 0};
            const auto& [got_kind, got_key, got_from, text] = got[r].got[i++];
            CHECK(got_kind == kind);
            CHECK(got_key == k);
            CHECK(got_from == from);
            CHECK(text == payload_text(kind, k, from, r));
          }
    const collective_stats st = channels[r]->stats();
    CHECK(st.rounds == steps * layers * 2);
    CHECK(st.bytes_sent == st.bytes_received);  // the texts differ only in the ranks' digits
  }
  CHECK(transport.exchanges() == n * steps * layers * 2);
  for (auto& c : channels)
    c->close();
}

TEST_CASE("collective channel: a close ends a round that a dead peer never enters") {
  testing::loopback_transport transport;
  const std::vector<bool> remote0{false, true}, remote1{true, false};
  int delivered = 0;
  std::string failure;
  collective_channel a(
    round_book(0, remote0), transport.engine(0, 0, remote0),
    [&](ep_payload, const ep_key&, int64_t, const std::vector<char>&) { ++delivered; },
    [&](const std::string& why) { failure = why; });
  collective_channel b(
    round_book(1, remote1), transport.engine(1, 1, remote1),
    [&](ep_payload, const ep_key&, int64_t, const std::vector<char>&) {}, [](const std::string&) {});
  const std::vector<char> id = transport.make_id();
  a.start(id);
  b.start(id);
  REQUIRE(testing::eventually([&] { return a.joined() && b.joined(); }, 5s));
  a.stage(ep_payload::dispatch, {.step = 0, .layer_idx = 1, .micro_batch = 0}, 1,
          bytes_of("to a peer that died"));
  std::this_thread::sleep_for(20ms);  // a is inside its round, waiting for b
  const auto begin = std::chrono::steady_clock::now();
  a.close();
  CHECK(std::chrono::steady_clock::now() - begin < 2s);
  CHECK(delivered == 0);
  CHECK(failure.empty());  // a close is not a failure
  CHECK(transport.exchanges() == 0);
  a.stage(ep_payload::dispatch, {.step = 1, .layer_idx = 1, .micro_batch = 0}, 1,
          bytes_of("after"));  // dropped
  b.close();
  // a channel closed before any id came ends too
  collective_channel never(
    round_book(0, remote0), transport.engine(0, 0, remote0),
    [](ep_payload, const ep_key&, int64_t, const std::vector<char>&) {}, [](const std::string&) {});
  never.close();
  CHECK_FALSE(never.joined());
}

TEST_CASE("collective channel: a join that fails is reported once, and what is staged after is dropped") {
  const std::vector<bool> remote{false, true};
  std::mutex mutex;
  std::vector<std::string> failures;
  collective_channel c(
    round_book(0, remote), std::make_unique<failing_engine>(),
    [](ep_payload, const ep_key&, int64_t, const std::vector<char>&) {},
    [&](const std::string& why) {
      std::lock_guard lock{mutex};
      failures.push_back(why);
    });
  c.start({'x'});
  REQUIRE(testing::eventually(
    [&] {
      std::lock_guard lock{mutex};
      return !failures.empty();
    },
    5s));
  CHECK_NOTHROW(
    c.stage(ep_payload::dispatch, {.step = 0, .layer_idx = 0, .micro_batch = 0}, 1, bytes_of("x")));
  c.close();
  std::lock_guard lock{mutex};
  REQUIRE(failures.size() == 1);
  CHECK(failures[0] == "Duplicate GPU detected");
}
