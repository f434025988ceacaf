// tests/actors/test_nccl_transport.cpp
// The NCCL engine under the collective channel, where a GPU exists: a communicator joined with
// an id made by make_id, rounds whose bytes arrive unchanged (a dispatch-sized one and a 4 MiB
// one), and a close that ends a round a peer never enters. Two ranks need two devices (NCCL
// refuses two ranks of a communicator on one); with one, the join and an empty round run.
// Without a device or without NCCL in the build, the cases say why they were skipped.
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/rank/nccl_transport.hpp"
#include "config/model_config.hpp"  // input_error
#include "eventually.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

// false after a MESSAGE saying why NCCL cannot run here
bool nccl_or_skip(int min_devices) {
  if (!nccl_built()) {
    MESSAGE("skipped: built without NCCL (it needs nvcc and NCCL at build time)");
    CHECK_THROWS_AS((void)start_nccl_transport(), input_error);
    return false;
  }
  const int devices = nccl_devices();
  if (devices == 0) {
    MESSAGE("skipped: no CUDA device visible");
    CHECK_THROWS_WITH_AS((void)start_nccl_transport(), doctest::Contains("no CUDA device is visible"),
                         input_error);
    return false;
  }
  if (devices < min_devices) {
    MESSAGE("skipped: " << devices << " CUDA device(s), this case needs " << min_devices);
    return false;
  }
  return true;
}

std::vector<char> pattern(size_t n, int seed) {
  std::vector<char> b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed) * 7) & 0xff);
  return b;
}

}  // namespace

TEST_CASE("nccl: one rank joins a communicator and runs an empty round") {
  if (!nccl_or_skip(1))
    return;
  const std::shared_ptr<collective_transport> nccl = start_nccl_transport();
  CHECK(nccl->name() == "NCCL");
  const std::vector<char> id = nccl->make_id();
  CHECK(id.size() == 128);  // NCCL_UNIQUE_ID_BYTES
  std::unique_ptr<exchange_engine> e = nccl->engine(0, 0, {false});
  REQUIRE(e->join(id));
  std::vector<std::vector<char>> from(1);
  CHECK(e->exchange({{}}, from));
  CHECK(from[0].empty());
}

TEST_CASE("nccl: two ranks' rounds arrive unchanged, and a close ends a round a peer never enters") {
  if (!nccl_or_skip(2))
    return;
  const std::shared_ptr<collective_transport> nccl = start_nccl_transport();
  const std::vector<bool> remote[2] = {{false, true}, {true, false}};
  std::mutex mutex;
  std::vector<std::vector<std::vector<char>>> got(2);
  std::vector<std::string> failures;
  std::vector<std::unique_ptr<collective_channel>> ch;
  for (int64_t r = 0; r < 2; ++r)
    ch.push_back(std::make_unique<collective_channel>(
      round_book(r, remote[r]), nccl->engine(r, r, remote[r]),
      [&, r](ep_payload, const ep_key&, int64_t, const std::vector<char>& b) {
        std::lock_guard lock{mutex};
        got[r].push_back(b);
      },
      [&](const std::string& why) {
        std::lock_guard lock{mutex};
        failures.push_back(why);
      }));
  const std::vector<char> id = nccl->make_id();
  ch[0]->start(id);
  ch[1]->start(id);
  const size_t sizes[] = {20 * 1024, 4 << 20, 1};  // a decode dispatch, a prefill combine, a byte
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t r = 0; r < 2; ++r)
      ch[r]->stage(ep_payload::dispatch, {.step = i, .layer_idx = 1, .micro_batch = 0}, 1 - r,
                   pattern(sizes[i] + static_cast<size_t>(r), static_cast<int>(10 * i + r)));
  REQUIRE(testing::eventually(
    [&] {
      std::lock_guard lock{mutex};
      return (got[0].size() == 3 && got[1].size() == 3) || !failures.empty();
    },
    60s));
  std::lock_guard lock{mutex};
  REQUIRE(failures.empty());
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 3; ++i)
      CHECK(got[r][i] == pattern(sizes[i] + static_cast<size_t>(1 - r), static_cast<int>(10 * i + 1 - r)));
  // rank 1 dies: rank 0's next round never completes until its channel is closed
  ch[0]->stage(ep_payload::combine, {.step = 3, .layer_idx = 1, .micro_batch = 0}, 1, pattern(100, 1));
  std::this_thread::sleep_for(100ms);
  const auto begin = std::chrono::steady_clock::now();
  ch[0]->close();
  CHECK(std::chrono::steady_clock::now() - begin < 10s);
  ch[1]->close();
}
