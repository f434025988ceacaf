// tests/net/test_rpc_server_config.cpp
// Live configuration over the wire, 1P+2D: admin.config lists every target with its epoch,
// admin.configure changes one (422 naming the field when refused, nothing changed),
// admin.drain / admin.undrain move new work off a decode rank; all of them 403 for a client
// connection, without --fault-injection.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "server_fixture.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

const net::auth_keys keys{.api_key = "client-secret", .admin_key = "admin-secret"};

using fields = std::map<std::string, msgpack::object>;

std::string message_of(const net::rpc_response& r) {
  return r.error.as<fields>().at("message").as<std::string>();
}

/// [0, msgid, method, [{k: v...}]] with string or integer values.
template <class... KVs>
std::string map_request(uint32_t msgid, const std::string& method, const KVs&... kvs) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack(method).pack_array(1).pack_map(sizeof...(KVs));
    (pk.pack(kvs.first).pack(kvs.second), ...);
  });
}

template <class V>
std::pair<std::string, V> kv(std::string k, V v) {
  return {std::move(k), std::move(v)};
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "admin.configure, admin.config and admin.drain over the wire") {
  if (skip_without_tokenizer())
    return;
  topo.decode_ranks = 2;
  start({}, keys);
  test_client client(server->port());
  REQUIRE(error_code(ask(client, request_bytes(1, "auth", std::vector<std::string>{"client-secret"}))) == 0);
  CHECK(error_code(ask(client, request_bytes(2, "admin.config", std::vector<int>{}))) == 403);
  CHECK(error_code(ask(client, map_request(3, "admin.drain", kv("role", "decode"), kv("rank", 1)))) == 403);

  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, request_bytes(1, "auth", std::vector<std::string>{"admin-secret"}))) == 0);
  net::rpc_response r = ask(admin, request_bytes(2, "admin.config", std::vector<int>{}));
  REQUIRE(error_code(r) == 0);
  auto all = r.result.as<std::map<std::string, fields>>();
  REQUIRE(all.size() == 4);
  CHECK(all.at("decode_balancer").at("epoch").as<int64_t>() == 0);
  CHECK(all.at("expert_balancer").at("policy").as<std::string>() == "off");  // the topology's default
  CHECK(all.at("expert_balancer").at("interval_steps").as<int64_t>() == 1000);
  CHECK(all.at("decode_balancer").at("policy").as<std::string>() == "deepseek");
  CHECK(all.at("request_queue").at("max_queued").as<int64_t>() == topo.max_queued_requests);
  CHECK(all.at("prefill_balancer").at("token_weight").as<double>() == 1.0);

  r = ask(admin,
          map_request(3, "admin.configure", kv("target", "decode_balancer"), kv("policy", "round_robin")));
  REQUIRE(error_code(r) == 0);
  CHECK(result_map(r).at("target").as<std::string>() == "decode_balancer");
  CHECK(result_map(r).at("epoch").as<int64_t>() == 1);
  // refused whole: policy would be fine, kv_weight is not
  r = ask(admin, map_request(4, "admin.configure", kv("target", "decode_balancer"),
                             kv("policy", "power_of_two"), kv("kv_weight", -3)));
  CHECK(error_code(r) == 422);
  CHECK(message_of(r) == "kv_weight: expected a number from 0 to 1000000, got -3");
  r = ask(admin, map_request(5, "admin.configure", kv("target", "metrics"), kv("policy", "x")));
  CHECK(error_code(r) == 422);
  CHECK(
    message_of(r) ==
    "target: expected one of prefill_balancer, decode_balancer, expert_balancer, request_queue, got \"metrics\"");
  r = ask(admin, map_request(6, "admin.drain", kv("role", "decode"), kv("rank", 2)));
  CHECK(error_code(r) == 422);
  CHECK(message_of(r) == "drain: expected an integer from 0 to 1, got 2");
  r = ask(admin, map_request(7, "admin.drain", kv("role", "prefill"), kv("rank", 0)));  // its only one
  CHECK(error_code(r) == 422);
  CHECK(message_of(r) == "drained: every rank would be drained; at least one must take new work");

  r = ask(admin, map_request(8, "admin.drain", kv("role", "decode"), kv("rank", 0)));
  REQUIRE(error_code(r) == 0);
  CHECK(result_map(r).at("epoch").as<int64_t>() == 2);
  r = ask(admin, request_bytes(9, "admin.config", std::vector<int>{}));
  all = r.result.as<std::map<std::string, fields>>();
  CHECK(all.at("decode_balancer").at("policy").as<std::string>() == "round_robin");
  CHECK(all.at("decode_balancer").at("drained").as<std::vector<int64_t>>() == std::vector<int64_t>{0});
  // drained rank 0 takes none of three generates; rank 1 all
  const std::vector<int32_t> prompt = {0, 300, 301};
  for (uint32_t id = 10; id < 13; ++id) {
    client.send(packed([&](packer& pk) {
      pk.pack_array(4).pack(0).pack(id).pack("generate").pack_array(1).pack_map(3);
      pk.pack("input_ids").pack(prompt).pack("max_tokens").pack(3).pack("ignore_eos").pack(true);
    }));
    CHECK(error_code(client.next_response()) == 0);
  }
  r = ask(client, request_bytes(13, "stats", std::vector<int>{}));
  REQUIRE(error_code(r) == 0);
  const auto ranks = result_map(r).at("ranks").as<std::vector<fields>>();
  REQUIRE(ranks.size() == 3);
  CHECK(ranks[1].at("requests").as<int64_t>() == 0);
  CHECK(ranks[2].at("requests").as<int64_t>() == 3);
  // and the balancers' balancedness says so: decode 0 / 3 requests, mean / max = 1.5 / 3
  const auto balance = result_map(r).at("balance").as<std::map<std::string, fields>>();
  CHECK(balance.at("decode").at("per_rank").as<std::vector<double>>() == std::vector<double>{0, 3});
  CHECK(balance.at("decode").at("balancedness").as<double>() == 0.5);
  CHECK(balance.at("decode").at("picks").as<int64_t>() == 3);
  CHECK(balance.at("prefill").at("per_rank").as<std::vector<double>>() ==
        std::vector<double>{9});  // 3 x 3 tokens
  CHECK(balance.at("prefill").at("balancedness").as<double>() == 1.0);
  r = ask(admin, map_request(14, "admin.undrain", kv("role", "decode"), kv("rank", 0)));
  REQUIRE(error_code(r) == 0);
  CHECK(result_map(r).at("epoch").as<int64_t>() == 3);
}

TEST_CASE_FIXTURE(server_fixture,
                  "admin.expert_load counts the tokens each gate routed, per layer and expert") {
  if (skip_without_tokenizer())
    return;
  topo.decode_ranks = 2;
  start({}, keys);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, request_bytes(1, "auth", std::vector<std::string>{"admin-secret"}))) == 0);
  // three prompts of 3, 5 and 7 tokens, 4 tokens out of each
  uint32_t id = 2;
  for (const int64_t len : {3, 5, 7}) {
    std::vector<int32_t> prompt = {0};
    for (int32_t t = 1; t < len; ++t)
      prompt.push_back(300 + t);
    admin.send(packed([&](packer& pk) {
      pk.pack_array(4).pack(0).pack(id++).pack("generate").pack_array(1).pack_map(3);
      pk.pack("input_ids").pack(prompt).pack("max_tokens").pack(4).pack("ignore_eos").pack(true);
    }));
    REQUIRE(error_code(admin.next_response()) == 0);
  }
  net::rpc_response r = ask(admin, request_bytes(id, "admin.expert_load", std::vector<int>{}));
  REQUIRE(error_code(r) == 0);
  const auto m = result_map(r);
  CHECK(m.at("window_steps").as<int64_t>() == 1000);
  using load_matrix = std::vector<std::vector<int64_t>>;
  const auto row_sums = [](const load_matrix& load) {
    std::vector<int64_t> sums;
    for (const auto& row : load) {
      CHECK(row.size() == 16);  // the tiny model's routed experts
      int64_t s = 0;
      for (const int64_t c : row)
        s += c;
      sums.push_back(s);
    }
    return sums;
  };
  // the tiny model: layer 0 dense, MoE layers 1 and 2, 4 experts per token. Prefill routes
  // every prompt token on layer 1 and, on the last layer, only each prompt's last (its logits);
  // decode routes each of the 3 tokens it makes after the first on both.
  const auto prefill = m.at("prefill").as<fields>();
  const auto decode = m.at("decode").as<fields>();
  CHECK(prefill.at("ranks").as<int64_t>() == 1);
  CHECK(decode.at("ranks").as<int64_t>() == 2);
  CHECK(row_sums(prefill.at("load").as<load_matrix>()) == std::vector<int64_t>{4 * 15, 4 * 3});
  CHECK(row_sums(decode.at("load").as<load_matrix>()) == std::vector<int64_t>{4 * 9, 4 * 9});
  CHECK(row_sums(m.at("load").as<load_matrix>()) == std::vector<int64_t>{4 * 24, 4 * 12});
  test_client client(server->port());
  REQUIRE(error_code(ask(client, request_bytes(1, "auth", std::vector<std::string>{"client-secret"}))) == 0);
  CHECK(error_code(ask(client, request_bytes(2, "admin.expert_load", std::vector<int>{}))) == 403);
}

TEST_CASE_FIXTURE(server_fixture,
                  "admin.rebalance installs a placement per EP group from the routed load, 503 before any") {
  if (skip_without_tokenizer())
    return;
  topo.decode_ranks = 2;
  start({}, keys);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, request_bytes(1, "auth", std::vector<std::string>{"admin-secret"}))) == 0);
  // nothing routed yet: every group refuses, and says why
  net::rpc_response r = ask(admin, request_bytes(2, "admin.rebalance", std::vector<int>{}));
  CHECK(error_code(r) == 503);
  CHECK(message_of(r) ==
        "admin.rebalance: prefill: no tokens were routed in the window yet; decode: no tokens were routed "
        "in the window yet");
  r = ask(admin, map_request(3, "admin.rebalance", kv("role", std::string("middle"))));
  CHECK(error_code(r) == 422);
  CHECK(message_of(r) == "role: expected prefill or decode, got \"middle\"");
  uint32_t id = 4;
  for (const int64_t len : {6, 9}) {
    std::vector<int32_t> prompt = {0};
    for (int32_t t = 1; t < len; ++t)
      prompt.push_back(200 + 7 * t);
    admin.send(packed([&](packer& pk) {
      pk.pack_array(4).pack(0).pack(id++).pack("generate").pack_array(1).pack_map(3);
      pk.pack("input_ids").pack(prompt).pack("max_tokens").pack(6).pack("ignore_eos").pack(true);
    }));
    REQUIRE(error_code(admin.next_response()) == 0);
  }
  r = ask(admin, map_request(id++, "admin.rebalance", kv("role", std::string("decode"))));
  REQUIRE(error_code(r) == 0);
  const fields m = result_map(r);
  CHECK(m.at("epoch").as<uint64_t>() ==
        1);  // a plan of the 16 experts over 2 ranks differs from 0..7 | 8..15
  const auto groups = m.at("groups").as<std::vector<fields>>();
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].at("role").as<std::string>() == "decode");
  CHECK(groups[0].at("error").as<std::string>() == "");
  CHECK(groups[0].at("balancedness_after").as<std::vector<double>>().size() == 2);
  // stats name it: the decode group's balancer did one rebalance and failed one (before any load)
  r = ask(admin, request_bytes(id++, "stats", std::vector<int>{}));
  REQUIRE(error_code(r) == 0);
  const auto experts = result_map(r).at("experts").as<std::map<std::string, fields>>();
  REQUIRE(experts.count("decode") == 1);
  CHECK(experts.at("decode").at("rebalances").as<int64_t>() == 1);
  CHECK(experts.at("decode").at("failed").as<int64_t>() == 1);
  CHECK(experts.at("decode").at("epoch").as<uint64_t>() == 1);
  CHECK(experts.at("prefill").at("failed").as<int64_t>() == 1);
  test_client client(server->port());
  REQUIRE(error_code(ask(client, request_bytes(1, "auth", std::vector<std::string>{"client-secret"}))) == 0);
  CHECK(error_code(ask(client, request_bytes(2, "admin.rebalance", std::vector<int>{}))) == 403);
}
