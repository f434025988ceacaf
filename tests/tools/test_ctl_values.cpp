// tests/tools/test_ctl_values.cpp
// What `moeserve ctl` reads (KEY=VALUE, TOML tables) and prints (MessagePack replies as JSON).
#include <doctest/doctest.h>

#include <string>

#include "config/model_config.hpp"
#include "tools/ctl_values.hpp"

using namespace moe;
using namespace moe::tools;

namespace {

std::string toml_error(const std::string& text) {
  try {
    static_cast<void>(parse_config_toml(text, "c.toml"));
  } catch (const input_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("ctl: KEY=VALUE takes booleans, integers, numbers, integer lists and words") {
  CHECK(parse_assignment("drain=1").value == config_value(int64_t{1}));
  CHECK(parse_assignment("kv_weight=0.25").value == config_value(0.25));
  CHECK(parse_assignment("seed=-7").value == config_value(int64_t{-7}));
  CHECK(parse_assignment("minimal_movement=true").value == config_value(true));
  CHECK(parse_assignment("policy=round_robin").value == config_value(std::string("round_robin")));
  CHECK(parse_assignment("drained=0,2").value == config_value(std::vector<int64_t>{0, 2}));
  CHECK(parse_assignment("drained=[1, 3]").value == config_value(std::vector<int64_t>{1, 3}));
  CHECK(parse_assignment("drained=[]").value == config_value(std::vector<int64_t>{}));
  CHECK(parse_assignment("name=a,b").value == config_value(std::string("a,b")));  // not integers
  CHECK(parse_assignment("policy=").value == config_value(std::string()));
  CHECK(parse_assignment("policy=x").key == "policy");
  CHECK_THROWS_WITH_AS(parse_assignment("policy"), "\"policy\": expected KEY=VALUE", input_error);
  CHECK_THROWS_WITH_AS(parse_assignment("=3"), "\"=3\": expected KEY=VALUE", input_error);
}

TEST_CASE("ctl apply: one change per TOML table, in the file's order") {
  const auto changes = parse_config_toml(R"(
[request_queue]
max_running = 8

[decode_balancer]
policy = "power_of_two"
seed = 3
kv_weight = 0.5
drained = [1]

[prefill_balancer]
drained = []
)",
                                         "c.toml");
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].target == "request_queue");
  CHECK(changes[1].target == "decode_balancer");
  CHECK(changes[2].target == "prefill_balancer");
  REQUIRE(changes[1].fields.size() == 4);
  // a table's keys in toml++'s (sorted) order: the server applies a change whole either way
  CHECK(changes[1].fields[0].key == "drained");
  CHECK(changes[1].fields[0].value == config_value(std::vector<int64_t>{1}));
  CHECK(changes[1].fields[1].value == config_value(0.5));
  CHECK(changes[1].fields[2].value == config_value(std::string("power_of_two")));
  CHECK(changes[1].fields[3].value == config_value(int64_t{3}));
  CHECK(changes[2].fields[0].value == config_value(std::vector<int64_t>{}));
}

TEST_CASE("ctl apply: what a change cannot hold is refused naming the line and key") {
  CHECK(toml_error("policy = \"x\"\n") ==
        "c.toml:1: policy: expected a table of a target's fields, e.g. [decode_balancer]");
  CHECK(toml_error("[decode_balancer]\ndrained = [1, \"a\"]\n") ==
        "c.toml:2: drained: expected a list of integers");
  CHECK(toml_error("[decode_balancer]\nx = { a = 1 }\n") ==
        "c.toml:2: x: expected a boolean, number, string or list of integers");
  CHECK(toml_error("[decode_balancer\n").find("c.toml:1: ") == 0);
  CHECK(toml_error("").find("no error") == 0);
}

TEST_CASE("ctl: replies print as JSON") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(4).pack("epoch").pack(3).pack("weights").pack(std::vector<double>{0.5, -1.0});
  pk.pack("on").pack(true).pack("none").pack_nil();
  const msgpack::object_handle h = msgpack::unpack(buf.data(), buf.size());
  CHECK(to_json(h.get()) == nlohmann::json::parse(R"({"epoch": 3, "weights": [0.5, -1.0], "on": true,
                                                      "none": null})"));
  msgpack::sbuffer neg;
  msgpack::pack(neg, int64_t{-5});
  CHECK(to_json(msgpack::unpack(neg.data(), neg.size()).get()) == -5);
}
