// tests/net/test_rpc_server.cpp
// The TCP server end to end on loopback: pipelining, a request one byte at a time, out-of-order
// completion, queue time spent waiting for a running slot, cancel, client disconnect (KV
// freed, counted as cancelled), and streamed outputs of 100 concurrent clients equal to the single-rank generator.
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <thread>

#include "net/server_fixture.hpp"
#include "net/wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

/// [0, msgid, "generate", [{input_ids, max_tokens, ignore_eos, stream, temperature[, seed]}]]
std::string generate_ids(uint32_t msgid, const std::vector<int32_t>& ids, int32_t max_tokens, bool stream,
                         std::optional<uint64_t> seed = std::nullopt) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(seed ? 6 : 5);
    pk.pack("input_ids").pack(ids).pack("max_tokens").pack(max_tokens);
    pk.pack("ignore_eos").pack(true).pack("stream").pack(stream);
    pk.pack("temperature").pack(seed ? 0.8 : 0.0);
    if (seed)
      pk.pack("seed").pack(*seed);
  });
}

sampling_params sampling_of(int32_t max_tokens, std::optional<uint64_t> seed = std::nullopt) {
  sampling_params p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.temperature = seed ? 0.8f : 0.0f;
  p.seed = seed;
  return p;
}

struct streamed {
  std::vector<int32_t> ids;
  std::string text;
  bool seq_ok = true;
};

/// The token notifications of `msgid`, in order, checked for contiguous seq from 0.
streamed collect(const std::vector<net::rpc_notification>& notes, uint32_t msgid) {
  streamed s;
  uint64_t next_seq = 0;
  for (const auto& n : notes) {
    REQUIRE(n.method == "token");
    const auto& p = n.params.via.array;
    if (p.ptr[0].as<uint32_t>() != msgid)
      continue;
    s.seq_ok = s.seq_ok && p.ptr[1].as<uint64_t>() == next_seq++;
    for (int32_t id : p.ptr[2].as<std::vector<int32_t>>())
      s.ids.push_back(id);
    s.text += p.ptr[3].as<std::string>();
  }
  return s;
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "pipelined requests on one connection are all answered") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send(request_bytes(1, "health", std::vector<int>{}) +
              request_bytes(2, "tokenize", std::vector<std::string>{"hello world"}) +
              generate_ids(3, {0, 5, 7}, 3, false) +
              request_bytes(4, "detokenize", std::vector<std::vector<int32_t>>{{0}}));
  std::map<uint32_t, net::rpc_response> got;
  for (int i = 0; i < 4; ++i) {
    net::rpc_response r = client.next_response();
    got.emplace(r.msgid, std::move(r));
  }
  REQUIRE(got.size() == 4);
  CHECK(result_map(got[1]).at("status").as<std::string>() == "ok");
  CHECK(got[2].result.as<std::vector<int32_t>>() == tok->encode("hello world", true));
  const generation_result want = reference_run({0, 5, 7}, sampling_of(3));
  CHECK(result_map(got[3]).at("output_ids").as<std::vector<int32_t>>() == want.output_ids);
  CHECK(result_map(got[3]).at("finish_reason").as<std::string>() == "length");
  CHECK(got[4].result.as<std::string>() == tok->decode({0}));
}

TEST_CASE_FIXTURE(server_fixture, "a request fed one byte at a time streams like the generator") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send_bytewise(generate_ids(7, {0, 11, 12, 13}, 5, true, 42));
  std::vector<net::rpc_notification> notes;
  const net::rpc_response r = client.next_response(&notes);
  REQUIRE(r.msgid == 7);
  REQUIRE(error_code(r) == 0);
  const generation_result want = reference_run({0, 11, 12, 13}, sampling_of(5, 42));
  const streamed s = collect(notes, 7);
  CHECK(s.seq_ok);
  CHECK(s.ids == want.output_ids);
  CHECK(s.text == want.text);
  const auto result = result_map(r);
  CHECK(result.at("text").as<std::string>() == want.text);
  const auto usage = result.at("usage").as<std::map<std::string, int64_t>>();
  CHECK(usage.at("prompt_tokens") == 4);
  CHECK(usage.at("completion_tokens") == 5);
  const auto timings = result.at("timings").as<std::map<std::string, double>>();
  CHECK(timings.at("ttft") >= timings.at("queue"));
}

TEST_CASE_FIXTURE(server_fixture, "a short generate overtakes a long one on the same connection") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send(generate_ids(1, {0, 3, 4}, 60, false) + generate_ids(2, {0, 9}, 1, false));
  const net::rpc_response first = client.next_response();
  const net::rpc_response second = client.next_response();
  CHECK(first.msgid == 2);
  CHECK(second.msgid == 1);
  CHECK(result_map(second).at("output_ids").as<std::vector<int32_t>>().size() == 60);
}

TEST_CASE_FIXTURE(server_fixture,
                  "queue time runs until prefill starts: a request behind the only running slot waits") {
  if (skip_without_tokenizer())
    return;
  topo.max_running_requests = 1;
  start();
  test_client client(server->port());
  // 120 tokens: long against the few ms by which the second's admission may trail the first's
  // on a loaded machine (30 tokens, ~18 ms in all, failed the 0.9 below under a parallel ctest)
  client.send(generate_ids(1, {0, 3, 4}, 120, false) + generate_ids(2, {0, 9}, 1, false));
  std::map<uint32_t, std::map<std::string, double>> timings;
  for (int i = 0; i < 2; ++i) {
    const net::rpc_response r = client.next_response();
    REQUIRE(error_code(r) == 0);
    timings[r.msgid] = result_map(r).at("timings").as<std::map<std::string, double>>();
  }
  const auto& first = timings[1];
  const auto& second = timings[2];
  // admitted at once, both; but the second is prefilled only after the first has finished
  // (its 119 decode steps come between the first's first token and the second's start)
  CHECK(second.at("queue") > first.at("queue"));
  CHECK(second.at("queue") >= first.at("ttft"));
  CHECK(second.at("queue") >= 0.9 * (first.at("ttft") + first.at("decode")));
  for (const auto* t : {&first, &second}) {
    CHECK(t->at("queue") >= 0.0);
    CHECK(t->at("ttft") >= t->at("queue"));  // the first token follows prefill
  }
}

TEST_CASE_FIXTURE(server_fixture, "100 concurrent clients stream what the single-rank generator makes") {
  if (skip_without_tokenizer())
    return;
  start();
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<test_client>> clients;
  for (uint32_t i = 0; i < 100; ++i) {
    std::vector<int32_t> ids{0};
    for (uint32_t t = rng() % 6; t > 0; --t)
      ids.push_back(static_cast<int32_t>(rng() % 1000));
    prompts.push_back(ids);
    clients.push_back(std::make_unique<test_client>(server->port()));
    clients.back()->send(
      generate_ids(i, ids, 1 + i % 4, true, i % 3 == 0 ? std::optional<uint64_t>(i) : std::nullopt));
  }
  for (uint32_t i = 0; i < 100; ++i) {
    CAPTURE(i);
    std::vector<net::rpc_notification> notes;
    const net::rpc_response r = clients[i]->next_response(&notes);
    REQUIRE(error_code(r) == 0);
    const generation_result want = reference_run(
      prompts[i], sampling_of(1 + i % 4, i % 3 == 0 ? std::optional<uint64_t>(i) : std::nullopt));
    const streamed s = collect(notes, i);
    CHECK(s.seq_ok);
    CHECK(s.ids == want.output_ids);
    CHECK(s.text == want.text);
  }
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
}

TEST_CASE_FIXTURE(server_fixture, "a client that disconnects mid-stream frees its KV") {
  if (skip_without_tokenizer())
    return;
  start();
  {
    test_client client(server->port());
    client.send(generate_ids(1, {0, 1, 2, 3}, 120, true));
    const net::rpc_message m = client.next();  // the first token is out
    REQUIRE(std::holds_alternative<net::rpc_notification>(m));
    client.close();
  }
  const std::vector<rank_stats> stats = idle_rank_stats();
  for (const rank_stats& s : stats) {
    CHECK(s.num_running == 0);
    CHECK(s.num_free_blocks == s.num_blocks);
  }
  CHECK(stats.back().num_steps < 119);  // aborted, not run to max_tokens
  test_client again(server->port());    // the server still serves
  again.send(request_bytes(1, "health", std::vector<int>{}));
  CHECK(error_code(again.next_response()) == 0);
  // the server's stats count it as cancelled, with the tokens it made, once the closed
  // connection's bridge has the aborted result
  const net::server_counters& counters = server->counters();
  CHECK(counters.wait_for(std::chrono::seconds(10), [&] { return counters.num_cancelled.load() > 0; }));
  again.send(request_bytes(2, "stats", std::vector<int>{}));
  const net::rpc_response r = again.next_response();
  REQUIRE(error_code(r) == 0);
  const auto m = result_map(r);
  const int64_t cancelled = m.at("cancelled").as<int64_t>();
  const int64_t output_tokens = m.at("output_tokens").as<int64_t>();
  CHECK(cancelled == 1);
  CHECK(output_tokens >= 1);  // at least the token it saw
}

TEST_CASE_FIXTURE(server_fixture, "the cluster stopping answers in-flight generates 503 at once") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send(generate_ids(1, {0, 1, 2, 3}, 120, true));
  REQUIRE(std::holds_alternative<net::rpc_notification>(client.next()));  // decoding
  const auto t0 = std::chrono::steady_clock::now();
  handles.stop();  // what serve does after SIGTERM
  const net::rpc_response r = client.next_response();
  CHECK(error_code(r) == 503);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));  // not a timeout's 10-30 s
}

TEST_CASE_FIXTURE(server_fixture, "a client that closes right after sending leaves nothing behind") {
  if (skip_without_tokenizer())
    return;
  start();
  {
    test_client client(server->port());
    std::string bytes;
    for (uint32_t i = 0; i < 5; ++i)
      bytes += generate_ids(i, {0, static_cast<int32_t>(i)}, 30, true);
    client.send(bytes);
    client.close();  // before any is admitted, likely
  }
  test_client other(server->port());  // the io thread has seen the close
  other.send(request_bytes(1, "health", std::vector<int>{}));
  CHECK(error_code(other.next_response()) == 0);
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
  // the fixture's actor system then shuts down only if the connection's bridge has quit
}

TEST_CASE_FIXTURE(server_fixture, "cancel ends a generate with finish_reason abort") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client client(server->port());
  client.send(generate_ids(5, {0, 1, 2}, 120, true));
  REQUIRE(std::holds_alternative<net::rpc_notification>(client.next()));
  client.send(request_bytes(6, "cancel", std::vector<uint32_t>{5}));
  std::map<uint32_t, net::rpc_response> got;
  for (int i = 0; i < 2; ++i) {
    net::rpc_response r = client.next_response();
    got.emplace(r.msgid, std::move(r));
  }
  CHECK(got[6].result.as<bool>());
  CHECK(result_map(got[5]).at("finish_reason").as<std::string>() == "abort");
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
}
