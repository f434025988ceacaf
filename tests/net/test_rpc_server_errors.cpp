// tests/net/test_rpc_server_errors.cpp
// Every error path of the TCP server answers with its code, and the limits close only the
// connection that broke them.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "net/server_fixture.hpp"
#include "net/wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

/// [0, msgid, "generate", [{key: value...}]] from a map filler.
template <class Fill>
std::string generate_with(uint32_t msgid, uint32_t num_keys, Fill&& fill) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(num_keys);
    fill(pk);
  });
}

int code_of(test_client& client, std::string_view request) {
  client.send(request);
  return error_code(client.next_response());
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "each bad request is answered with its error code") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client c(server->port());
  CHECK(code_of(c, request_bytes(1, "nope", std::vector<int>{})) == 404);
  CHECK(code_of(c, request_bytes(2, "generate", std::vector<int>{1})) == 400);
  CHECK(code_of(c, generate_with(3, 1, [](packer& pk) { pk.pack("max_token").pack(3); })) == 422);
  CHECK(code_of(c, generate_with(4, 1, [](packer& pk) {
                  pk.pack("input_ids").pack(std::vector<int32_t>(128, 1));
                })) == 413);  // fills the 128-token context
  CHECK(code_of(c, generate_with(5, 2, [](packer& pk) {
                  pk.pack("input_ids").pack(std::vector<int32_t>{0, 1}).pack("max_tokens").pack(127);
                })) == 422);
  CHECK(code_of(c, generate_with(6, 1, [](packer& pk) {
                  pk.pack("input_ids").pack(std::vector<int32_t>{0, 1000});
                })) == 422);  // outside the model's vocabulary
  CHECK(code_of(c, generate_with(7, 1, [](packer& pk) { pk.pack("prompt").pack("hi"); })) ==
        422);  // the tokenizer's ids exceed 1000
  CHECK(code_of(c, generate_with(8, 1, [](packer& pk) { pk.pack("temperature").pack(-1); })) == 422);
  CHECK(code_of(c, request_bytes(9, "health", std::vector<int>{1})) == 400);
  CHECK(code_of(c, generate_with(14, 2, [](packer& pk) {
                  pk.pack("input_ids").pack(std::vector<int32_t>{0}).pack("model").pack("other");
                })) == 422);
  CHECK(code_of(c, generate_with(15, 2, [](packer& pk) {
                  pk.pack("input_ids").pack(std::vector<int32_t>{0}).pack("logprobs").pack(21);
                })) == 422);  // vLLM's maximum is 20
  CHECK(code_of(c, request_bytes(10, "detokenize", std::vector<std::vector<int64_t>>{{-1}})) == 422);
  CHECK(code_of(c, request_bytes(11, "cancel", std::vector<std::string>{"x"})) == 422);
  c.send(request_bytes(13, "cancel", std::vector<uint32_t>{99}));
  CHECK_FALSE(c.next_response().result.as<bool>());  // nothing in flight with msgid 99
  c.send(notification_bytes("nope", std::vector<int>{}));
  const net::rpc_message m = c.next();
  const auto* note = std::get_if<net::rpc_notification>(&m);
  REQUIRE(note != nullptr);
  CHECK(note->method == "error");
  // the connection survived all of it
  CHECK(code_of(c, request_bytes(12, "models", std::vector<int>{})) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "per-connection in-flight limit answers 429 with a retry hint") {
  if (skip_without_tokenizer())
    return;
  start({.max_in_flight = 1});
  test_client c(server->port());
  auto gen = [](uint32_t msgid, int32_t max_tokens) {
    return generate_with(msgid, 3, [&](packer& pk) {
      pk.pack("input_ids").pack(std::vector<int32_t>{0, 1}).pack("max_tokens").pack(max_tokens);
      pk.pack("ignore_eos").pack(true);
    });
  };
  c.send(gen(1, 20) + gen(2, 1));
  const net::rpc_response rejected = c.next_response();
  REQUIRE(rejected.msgid == 2);
  CHECK(error_code(rejected) == 429);
  const auto err = rejected.error.as<std::map<std::string, msgpack::object>>();
  CHECK(err.at("retryable").as<bool>());
  CHECK(err.at("retry_after_ms").as<int>() > 0);
  CHECK(error_code(c.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "oversized and deeply nested frames close only their connection") {
  if (skip_without_tokenizer())
    return;
  start({.frames = {.max_frame_bytes = 4096}});
  test_client healthy(server->port());
  {
    test_client c(server->port());  // a string past the frame limit
    c.send(packed([](packer& pk) {
             pk.pack_array(4).pack(0).pack(1).pack("tokenize").pack_array(1).pack_str(3u << 20);
           }) +
           std::string(5000, 'a'));
    const net::rpc_response r = c.next_response();
    CHECK(r.msgid == 1);
    CHECK(error_code(r) == 413);
    CHECK(c.closed_by_server());
  }
  {
    test_client c(server->port());  // params nested 20 deep
    c.send(packed([](packer& pk) {
      pk.pack_array(4).pack(0).pack(2).pack("generate");
      for (int i = 0; i < 20; ++i)
        pk.pack_array(1);
      pk.pack(1);
    }));
    const net::rpc_response r = c.next_response();
    CHECK(r.msgid == 2);
    CHECK(error_code(r) == 413);
    CHECK(c.closed_by_server());
  }
  {
    test_client c(server->port());  // not MessagePack-RPC at all
    c.send(std::string("\xc1\xc1\xc1", 3));
    CHECK(c.closed_by_server());
  }
  healthy.send(request_bytes(1, "health", std::vector<int>{}));
  CHECK(error_code(healthy.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "idle and read-progress timeouts close the connection") {
  if (skip_without_tokenizer())
    return;
  start({.idle_timeout = std::chrono::milliseconds(300), .read_timeout = std::chrono::milliseconds(300)});
  test_client idle(server->port());
  CHECK(idle.closed_by_server());  // sent nothing
  test_client slow(server->port());
  slow.send(request_bytes(1, "health", std::vector<int>{}).substr(0, 3));
  CHECK(slow.closed_by_server());  // a message that stopped coming
}

TEST_CASE_FIXTURE(server_fixture, "a connection over the limit gets a 429 notification") {
  if (skip_without_tokenizer())
    return;
  start({.max_connections = 2});
  test_client a(server->port()), b(server->port());
  a.send(request_bytes(1, "health", std::vector<int>{}));  // a and b are both admitted
  CHECK(error_code(a.next_response()) == 0);
  b.send(request_bytes(1, "health", std::vector<int>{}));
  CHECK(error_code(b.next_response()) == 0);
  test_client refused(server->port());
  const net::rpc_message m = refused.next();
  const auto* note = std::get_if<net::rpc_notification>(&m);
  REQUIRE(note != nullptr);
  CHECK(note->method == "error");
  CHECK(refused.closed_by_server());
}

TEST_CASE_FIXTURE(server_fixture, "stats and ready go through the cluster") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client c(server->port());
  c.send(request_bytes(1, "ready", std::vector<int>{}));
  const net::rpc_response ready = c.next_response();
  REQUIRE(error_code(ready) == 0);
  CHECK(result_map(ready).at("ready").as<bool>());
  c.send(packed([](packer& pk) {
    pk.pack_array(4).pack(0).pack(2).pack("generate").pack_array(1).pack_map(3);
    pk.pack("input_ids").pack(std::vector<int32_t>{0, 4, 5}).pack("max_tokens").pack(2);
    pk.pack("ignore_eos").pack(true);
  }));
  REQUIRE(error_code(c.next_response()) == 0);
  c.send(request_bytes(3, "stats", std::vector<int>{}));
  const net::rpc_response stats = c.next_response();
  REQUIRE(error_code(stats) == 0);
  const auto m = result_map(stats);
  CHECK(m.at("requests").as<int64_t>() == 1);
  CHECK(m.at("input_tokens").as<int64_t>() == 3);
  CHECK(m.at("output_tokens").as<int64_t>() == 2);
  CHECK(m.at("ranks").via.array.size == 2);
  const auto ranks = m.at("ranks").as<std::vector<std::map<std::string, msgpack::object>>>();
  // a group of one rank each: both hold every routed expert once, in memory of their own
  CHECK(ranks[0].at("expert_bytes").as<int64_t>() > 0);
  CHECK(ranks[0].at("expert_bytes").as<int64_t>() == ranks[1].at("expert_bytes").as<int64_t>());
  for (const auto& rank : ranks) {
    CHECK(rank.at("occupancy_peak").as<double>() >= rank.at("occupancy_avg").as<double>());
    CHECK(rank.at("free_blocks").as<int64_t>() <= rank.at("blocks").as<int64_t>());
    // both prompts were prefilled; ready's one token came from prefill, so only one was decoded
    CHECK(rank.at("requests").as<int64_t>() == (rank.at("role").as<std::string>() == "prefill" ? 2 : 1));
  }
  CHECK(m.at("window").as<std::map<std::string, msgpack::object>>().at("output_tokens").as<int64_t>() == 2);
  CHECK(m.at("queue").as<std::map<std::string, int64_t>>().at("admitted") == 2);  // ready's too
}

TEST_CASE_FIXTURE(server_fixture, "a reply over the write buffer drops the connection, not the server") {
  if (skip_without_tokenizer())
    return;
  start({.max_write_buffer = 4096});
  test_client c(server->port());
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "word" + std::to_string(i) + " ";  // thousands of ids: over 4 KiB
  c.send(request_bytes(1, "tokenize", std::vector<std::string>{text}));
  CHECK(c.closed_by_server());
  test_client again(server->port());
  again.send(request_bytes(1, "tokenize", std::vector<std::string>{"short"}));
  CHECK(error_code(again.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "random bytes from many clients never take the server down") {
  if (skip_without_tokenizer())
    return;
  start({.idle_timeout = std::chrono::milliseconds(200), .read_timeout = std::chrono::milliseconds(200)});
  std::mt19937 rng(11);
  for (int i = 0; i < 60; ++i) {
    CAPTURE(i);
    test_client c(server->port());
    std::string bytes(1 + rng() % 512, '\0');
    for (char& b : bytes)
      b = static_cast<char>(rng());
    if (i % 3 == 0)  // a valid request's prefix first
      bytes.insert(0, request_bytes(1, "generate", std::vector<int>{}).substr(0, 4));
    try {
      c.send(bytes);
    } catch (const std::system_error&) {  // closed before all of it was sent
    }
    CHECK(c.closed_by_server());  // at the latest by a timeout
  }
  test_client after(server->port());
  after.send(request_bytes(1, "health", std::vector<int>{}));
  CHECK(error_code(after.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "detokenize takes any id the model can produce, past the tokenizer's") {
  if (skip_without_tokenizer())
    return;
  start({}, {}, 129280);  // V3's embedding rows; the tokenizer has 128815 ids
  REQUIRE(tok->vocab_size() < 129044);
  test_client c(server->port());
  c.send(request_bytes(1, "detokenize", std::vector<std::vector<int32_t>>{{0, 129044}}));
  const net::rpc_response r = c.next_response();
  REQUIRE(error_code(r) == 0);
  CHECK(r.result.as<std::string>() == tok->decode({0}));  // no token: no text, as in HF
  CHECK(code_of(c, request_bytes(2, "detokenize", std::vector<std::vector<int32_t>>{{129280}})) == 422);
}

TEST_CASE_FIXTURE(server_fixture, "a client whose sends straddle message boundaries keeps its connection") {
  if (skip_without_tokenizer())
    return;
  start({.idle_timeout = std::chrono::milliseconds(300), .read_timeout = std::chrono::milliseconds(300)});
  std::string bytes;
  for (uint32_t id = 1; id <= 12; ++id)
    bytes += request_bytes(id, "health", std::vector<int>{});
  const size_t len = bytes.size() / 12;  // msgids below 128: every request the same size
  // each send ends one message and starts the next, 100 ms apart: 1.2 s in all, every message
  // whole within 100 ms, the connection never without a started message
  test_client c(server->port());
  size_t at = 0;
  for (size_t k = 0; k <= 12; ++k) {
    const size_t end = std::min(bytes.size(), len / 2 + k * len);
    c.send(std::string_view(bytes).substr(at, end - at));
    at = end;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::set<uint32_t> answered;
  for (int i = 0; i < 12; ++i) {
    const net::rpc_response r = c.next_response();
    CHECK(error_code(r) == 0);
    answered.insert(r.msgid);
  }
  CHECK(answered.size() == 12);
}

TEST_CASE_FIXTURE(server_fixture, "ready and stats requests in flight per connection are bounded") {
  if (skip_without_tokenizer())
    return;
  start();
  // 20 pipelined in one send are read at once: the first 8 are asked of the cluster, whose
  // answers cannot come back before the read is handled, so the rest get 429
  std::string bytes;
  for (uint32_t id = 0; id < 20; ++id)
    bytes += request_bytes(id, id % 2 ? "stats" : "ready", std::vector<int>{});
  test_client c(server->port());
  c.send(bytes);
  int ok = 0, overloaded = 0;
  for (int i = 0; i < 20; ++i) {
    const int code = error_code(c.next_response());
    ok += code == 0;
    overloaded += code == 429;
  }
  CHECK(ok + overloaded == 20);
  CHECK(ok >= 8);
  CHECK(overloaded >= 1);
  c.send(request_bytes(99, "ready", std::vector<int>{}));  // answered ones free their places
  CHECK(error_code(c.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture,
                  "an overload burst of 10x the admission limit: immediate 429s, a bounded queue, and every "
                  "admitted request completes") {
  if (skip_without_tokenizer())
    return;
  topo.max_queued_requests = 8;
  topo.max_running_requests = 2;  // admitted at once: 8 waiting + 2 running
  start();
  const std::vector<int32_t> prompt = {0, 300, 301, 302, 303};
  constexpr int32_t max_tokens = 40;  // the admitted ones run long after the burst is answered
  const std::vector<int32_t> want =
    reference_run(prompt, {.temperature = 0.0f, .max_tokens = max_tokens, .ignore_eos = true}).output_ids;
  constexpr int num_connections = 4, per_connection = 25;  // 100 = 10 x (8 + 2)
  std::vector<std::unique_ptr<test_client>> clients;
  for (int k = 0; k < num_connections; ++k) {
    clients.push_back(std::make_unique<test_client>(server->port()));
    std::string burst;
    for (uint32_t i = 0; i < per_connection; ++i)
      burst += streamed_generate(i, prompt, max_tokens);
    clients.back()->send(burst);  // each connection's 25 in one write
  }
  int ok = 0, overloaded = 0, other = 0, refused_after_a_result = 0;
  int64_t max_queued = 0;
  for (auto& c : clients) {
    bool had_result = false;  // answers come in the order they are made
    for (int i = 0; i < per_connection; ++i) {
      const net::rpc_response r = c->next_response();
      const int code = error_code(r);
      if (code == 429) {
        ++overloaded;
        refused_after_a_result += had_result ? 1 : 0;
        const auto err = r.error.as<std::map<std::string, msgpack::object>>();
        CHECK(err.at("retryable").as<bool>());
        CHECK(err.at("retry_after_ms").as<uint32_t>() > 0);
      } else if (code == 0) {
        ++ok;
        had_result = true;
        CHECK(result_map(r).at("output_ids").as<std::vector<int32_t>>() == want);
      } else {
        ++other;
      }
      if (ok + overloaded == 50) {  // mid-way: the queue holds no more than its bound
        const net::rpc_response s = ask(*clients[0], request_bytes(900, "stats", std::vector<int>{}));
        REQUIRE(error_code(s) == 0);
        max_queued = result_map(s).at("queue").as<std::map<std::string, int64_t>>().at("queued");
      }
    }
  }
  CHECK(other == 0);
  CHECK(ok + overloaded == num_connections * per_connection);
  MESSAGE("admitted " << ok << ", refused " << overloaded);
  CHECK(ok >= 10);          // at least what the queue and the running slots hold
  CHECK(overloaded >= 50);  // the most of the burst is refused, not queued without bound
  CHECK(max_queued <= 8);
  CHECK(refused_after_a_result == 0);  // refused at once, before any admitted one finished
  const net::rpc_response stats = ask(*clients[0], request_bytes(901, "stats", std::vector<int>{}));
  REQUIRE(error_code(stats) == 0);
  const auto queue = result_map(stats).at("queue").as<std::map<std::string, int64_t>>();
  CHECK(queue.at("running") == 0);
  CHECK(queue.at("queued") == 0);
  CHECK(queue.at("admitted") == ok);
  CHECK(queue.at("rejected") == overloaded);
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
}
