// tests/net/test_rpc_server_admin.cpp
// Fault injection over the wire: admin.actors lists the supervised actors and admin.kill crashes
// one, on admin connections of a server started with --fault-injection; 404 without the flag,
// 403 for a client connection, 422 for a bad kind or a dead index. After killing the decode
// balancer and the 1P+1D ranks between generates, every generate still gives the single-rank
// generator's tokens, and stats still answers (it asks the ranks that live now, and the stats
// sampler's successor). A killed connection bridge answers its generates 503 and is replaced.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <variant>

#include "net/server_probes.hpp"
#include "server_fixture.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

const net::auth_keys keys{.api_key = "client-secret", .admin_key = "admin-secret"};

std::string auth_bytes(uint32_t msgid, const std::string& token) {
  return request_bytes(msgid, "auth", std::vector<std::string>{token});
}

/// [0, msgid, "generate", [{input_ids, max_tokens: 6, temperature: 0, ignore_eos: true}]]
std::string greedy_generate(uint32_t msgid, const std::vector<int32_t>& ids) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(4);
    pk.pack("input_ids").pack(ids).pack("max_tokens").pack(6);
    pk.pack("temperature").pack(0).pack("ignore_eos").pack(true);
  });
}

std::map<std::string, int64_t> restarts_by_kind(const net::rpc_response& r) {
  std::map<std::string, int64_t> out;
  for (const auto& a : r.result.as<std::vector<std::map<std::string, msgpack::object>>>())
    out[a.at("kind").as<std::string>()] += a.at("restarts").as<int64_t>();
  return out;
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "admin methods are 404 on a server without --fault-injection") {
  if (skip_without_tokenizer())
    return;
  start({}, keys);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, auth_bytes(1, "admin-secret"))) == 0);
  CHECK(error_code(ask(admin, request_bytes(2, "admin.actors", std::vector<int>{}))) == 404);
  CHECK(error_code(ask(admin, kill_bytes(3, "request_queue", 0))) == 404);
}

TEST_CASE_FIXTURE(server_fixture, "admin.kill crashes actors that come back, and generates go on") {
  if (skip_without_tokenizer())
    return;
  start({}, keys, 1000, /*fault_injection=*/true);
  test_client client(server->port());
  REQUIRE(error_code(ask(client, auth_bytes(1, "client-secret"))) == 0);
  CHECK(error_code(ask(client, request_bytes(2, "admin.actors", std::vector<int>{}))) == 403);
  CHECK(error_code(ask(client, kill_bytes(3, "request_queue", 0))) == 403);

  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, auth_bytes(1, "admin-secret"))) == 0);
  const net::rpc_response listed = ask(admin, request_bytes(2, "admin.actors", std::vector<int>{}));
  REQUIRE(error_code(listed) == 0);
  const std::map<std::string, int64_t> none = {{"connection_bridge", 0}, {"decode_balancer", 0},
                                               {"decode_rank", 0},       {"expert_balancer", 0},
                                               {"prefill_balancer", 0},  {"prefill_rank", 0},
                                               {"request_queue", 0},     {"stats_sampler", 0}};
  CHECK(restarts_by_kind(listed) == none);
  CHECK(error_code(ask(admin, kill_bytes(3, "nobody", 0))) == 422);
  CHECK(error_code(ask(admin, kill_bytes(4, "decode_rank", 7))) == 422);

  const std::vector<int32_t> prompt = {0, 300, 301, 302, 303};
  const std::vector<int32_t> want =
    reference_run(prompt, {.temperature = 0.0f, .max_tokens = 6, .ignore_eos = true}).output_ids;
  uint32_t msgid = 10;
  for (const char* kind : {"decode_balancer", "decode_rank", "prefill_rank", "prefill_balancer",
                           "stats_sampler", "expert_balancer"}) {
    CAPTURE(kind);
    const net::rpc_response killed = ask(admin, kill_bytes(msgid++, kind, 0));
    REQUIRE(error_code(killed) == 0);
    CHECK(result_map(killed).at("killed").as<bool>());
    const net::rpc_response r = ask(client, greedy_generate(msgid++, prompt));
    REQUIRE(error_code(r) == 0);
    CHECK(result_map(r).at("output_ids").as<std::vector<int32_t>>() == want);
  }
  const std::map<std::string, int64_t> once = {{"connection_bridge", 0}, {"decode_balancer", 1},
                                               {"decode_rank", 1},       {"expert_balancer", 1},
                                               {"prefill_balancer", 1},  {"prefill_rank", 1},
                                               {"request_queue", 0},     {"stats_sampler", 1}};
  CHECK(restarts_by_kind(ask(admin, request_bytes(msgid++, "admin.actors", std::vector<int>{}))) == once);
  net::rpc_response stats = ask(client, request_bytes(msgid++, "stats", std::vector<int>{}));
  for (int tries = 0; tries < 100 && error_code(stats) != 0; ++tries)  // the sampler's restart is on its way
    stats = ask(client, request_bytes(msgid++, "stats", std::vector<int>{}));
  REQUIRE(error_code(stats) == 0);
  CHECK(result_map(stats).at("requests").as<int64_t>() == 6);  // one generate after each kill
}

TEST_CASE_FIXTURE(server_fixture,
                  "admin.kill of a connection's bridge answers its generates 503, frees their KV, and the "
                  "connection goes on") {
  if (skip_without_tokenizer())
    return;
  topo.max_running_requests = 1;  // one decodes, the others wait in the queue: all in flight
  start({}, keys, 1000, /*fault_injection=*/true);
  test_client client(server->port());  // its bridge: connection_bridge 0
  REQUIRE(error_code(ask(client, auth_bytes(1, "client-secret"))) == 0);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, auth_bytes(1, "admin-secret"))) == 0);
  const std::vector<int32_t> prompt = {0, 300, 301, 302, 303};
  for (uint32_t msgid = 10; msgid < 14; ++msgid)
    client.send(streamed_generate(msgid, prompt, 100));
  while (!std::holds_alternative<net::rpc_notification>(client.next())) {}  // the first is decoding
  const net::rpc_response killed = ask(admin, kill_bytes(2, "connection_bridge", 0));
  REQUIRE(error_code(killed) == 0);
  std::set<uint32_t> answered;
  for (int i = 0; i < 4; ++i) {
    const net::rpc_response r = client.next_response();
    CAPTURE(r.msgid);
    CHECK(answered.insert(r.msgid).second);  // one answer each
    REQUIRE(error_code(r) == 503);
    const auto err = r.error.as<std::map<std::string, msgpack::object>>();
    CHECK(err.at("retryable").as<bool>());
    CHECK(err.at("retry_after_ms").as<uint32_t>() > 0);
    CHECK(err.at("message").as<std::string>().find("bridge") != std::string::npos);
  }
  CHECK(answered == std::set<uint32_t>{10, 11, 12, 13});
  // the same connection serves on, through a new bridge, with the cluster's KV all free again
  const net::rpc_response after = ask(client, greedy_generate(20, prompt));
  REQUIRE(error_code(after) == 0);
  CHECK(result_map(after).at("output_ids").as<std::vector<int32_t>>() ==
        reference_run(prompt, {.temperature = 0.0f, .max_tokens = 6, .ignore_eos = true}).output_ids);
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
  const net::rpc_response stats = ask(client, request_bytes(21, "stats", std::vector<int>{}));
  REQUIRE(error_code(stats) == 0);
  CHECK(result_map(stats).at("queue").as<std::map<std::string, int64_t>>().at("running") == 0);
  const net::rpc_response listed = ask(admin, request_bytes(3, "admin.actors", std::vector<int>{}));
  int64_t bridges = 0;
  for (const auto& a : listed.result.as<std::vector<std::map<std::string, msgpack::object>>>())
    bridges += a.at("kind").as<std::string>() == "connection_bridge" ? 1 : 0;
  CHECK(bridges == 2);  // the admin's and the client's new one
}

TEST_CASE("ready names the parts being restarted: every supervised part the listing lacks") {
  cluster c;
  c.prefill_ranks.resize(1);
  c.decode_ranks.resize(2);
  std::vector<actor_info> live = {{.kind = "request_queue"},           {.kind = "prefill_balancer"},
                                  {.kind = "decode_balancer"},         {.kind = "prefill_rank"},
                                  {.kind = "decode_rank", .index = 0}, {.kind = "decode_rank", .index = 1},
                                  {.kind = "session", .index = 7}};
  CHECK(net::missing_parts(c, live).empty());
  live.erase(live.begin() + 5);  // decode_rank 1
  live.erase(live.begin());      // request_queue
  CHECK(net::missing_parts(c, live) == "request_queue 0, decode_rank 1");
  CHECK(net::not_serving(c, live, false) == "restarting: request_queue 0, decode_rank 1");
  CHECK(net::not_serving(c, live, true) == "restarting: request_queue 0");  // the front's own part
}

TEST_CASE("ready on a multi-process front: a rank lost with its node leaves its group's survivors serving") {
  cluster c;
  c.prefill_ranks.resize(1);
  c.decode_ranks.resize(2);
  std::vector<actor_info> live = {{.kind = "request_queue"},
                                  {.kind = "prefill_balancer"},
                                  {.kind = "decode_balancer"},
                                  {.kind = "prefill_rank"},
                                  {.kind = "decode_rank", .index = 0}};  // decode_rank 1 lost
  CHECK(net::not_serving(c, live, true).empty());
  CHECK(net::not_serving(c, live, false) == "restarting: decode_rank 1");
  live.pop_back();  // and decode_rank 0
  CHECK(net::not_serving(c, live, true) == "lost with their nodes: every decode rank");
  live.erase(live.begin() + 3);  // and the prefill rank
  CHECK(net::not_serving(c, live, true) == "lost with their nodes: every prefill rank, every decode rank");
}

TEST_CASE_FIXTURE(server_fixture, "ready comes back on its own after a rank is killed") {
  if (skip_without_tokenizer())
    return;
  start({}, keys, 1000, /*fault_injection=*/true);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, auth_bytes(1, "admin-secret"))) == 0);
  REQUIRE(error_code(ask(admin, request_bytes(2, "ready", std::vector<int>{}))) == 0);
  for (const char* kind : {"decode_rank", "prefill_rank", "request_queue"}) {
    CAPTURE(kind);
    REQUIRE(error_code(ask(admin, kill_bytes(3, kind, 0))) == 0);
    // 503 ("restarting: ...") while the part is down, then 200 with no one's help
    int code = -1;
    for (uint32_t msgid = 10; msgid < 1010 && code != 0; ++msgid) {
      const net::rpc_response r = ask(admin, request_bytes(msgid, "ready", std::vector<int>{}));
      code = error_code(r);
      if (code != 0) {
        REQUIRE(code == 503);
        CHECK(r.error.as<std::map<std::string, msgpack::object>>().at("message").as<std::string>().find(
                "ready: ") == 0);
      }
    }
    CHECK(code == 0);
  }
}
