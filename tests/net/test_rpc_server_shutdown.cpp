// tests/net/test_rpc_server_shutdown.cpp
// Graceful shutdown (what SIGTERM does in `moeserve serve`): once drain() starts, a new generate
// gets a retryable 503 at once while the one in flight streams to its end; past the grace period
// the generates still running get a retryable 503, their KV is freed, and drain() returns.
#include <doctest/doctest.h>

#include <future>
#include <thread>
#include <string>

#include "server_fixture.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

/// A server whose requests may stream 200 tokens, and a client connected to it.
test_client start_for_long_streams(server_fixture& fx) {
  fx.topo.max_context = 256;
  fx.topo.kv_blocks = 160;
  fx.start();
  return test_client(fx.server->port());
}

std::map<std::string, msgpack::object> error_map(const net::rpc_response& r) {
  return r.error.as<std::map<std::string, msgpack::object>>();
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "a draining server refuses new generates and lets those in flight finish") {
  if (skip_without_tokenizer())
    return;
  test_client client = start_for_long_streams(*this);
  const std::vector<int32_t> prompt = {0, 40, 41, 42};
  client.send(streamed_generate(1, prompt, 200));
  REQUIRE(std::holds_alternative<net::rpc_notification>(client.next()));  // it streams
  auto drained = std::async(std::launch::async, [&] { return server->drain(30s); });
  while (!server->counters().draining)  // set first thing
    std::this_thread::yield();
  client.send(streamed_generate(2, prompt, 2));
  std::vector<net::rpc_notification> notes;
  const net::rpc_response refused = client.next_response(&notes);
  REQUIRE(refused.msgid == 2);
  REQUIRE(error_code(refused) == 503);
  CHECK(error_map(refused).at("retryable").as<bool>());
  CHECK(error_map(refused).at("retry_after_ms").as<uint32_t>() > 0);
  CHECK(error_map(refused).at("message").as<std::string>().find("shutting down") != std::string::npos);
  const net::rpc_response first = client.next_response(&notes);
  REQUIRE(first.msgid == 1);
  REQUIRE(error_code(first) == 0);
  const auto want = reference_run(prompt, {.temperature = 0.0f, .max_tokens = 200, .ignore_eos = true});
  CHECK(result_map(first).at("output_ids").as<std::vector<int32_t>>() == want.output_ids);
  REQUIRE(drained.wait_for(30s) == std::future_status::ready);
  CHECK(drained.get() == 0);
}

TEST_CASE_FIXTURE(server_fixture,
                  "past the grace period the generates in flight get a 503 and free their KV") {
  if (skip_without_tokenizer())
    return;
  test_client client = start_for_long_streams(*this);
  client.send(streamed_generate(1, {0, 50, 51}, 200) + streamed_generate(2, {0, 60, 61}, 200));
  REQUIRE(std::holds_alternative<net::rpc_notification>(client.next()));
  CHECK(server->drain(0ms) == 2);
  std::map<uint32_t, int> codes;
  for (int i = 0; i < 2; ++i) {
    const net::rpc_response r = client.next_response();
    codes[r.msgid] = error_code(r);
    CHECK(error_map(r).at("retryable").as<bool>());
  }
  CHECK(codes == std::map<uint32_t, int>{{1, 503}, {2, 503}});
  CHECK(client.closed_by_server());
  for (const rank_stats& s : idle_rank_stats()) {
    CHECK(s.num_running == 0);
    CHECK(s.num_free_blocks == s.num_blocks);
  }
}
