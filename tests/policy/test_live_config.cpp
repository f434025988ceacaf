// tests/policy/test_live_config.cpp
// Live configuration changes (actors/policy/live_config.hpp): validated whole, errors that name
// the field, drain and undrain, and a target's fields restoring it exactly.
#include <doctest/doctest.h>

#include "actors/policy/live_config.hpp"

using namespace moe;

namespace {

template <class T>
T ok(const std::variant<T, std::string>& r) {
  if (const auto* e = std::get_if<std::string>(&r))
    FAIL("unexpected error: " << *e);
  return std::get<T>(r);
}

template <class T>
std::string error_of(const std::variant<T, std::string>& r) {
  REQUIRE(std::holds_alternative<std::string>(r));
  return std::get<std::string>(r);
}

}  // namespace

TEST_CASE("live config: a prefill balancer change applies every field or none") {
  const prefill_balancer_settings boot{.num_ranks = 2};
  const prefill_balancer_settings s =
    ok(changed(boot, {{"policy", std::string("least_tokens")}, {"token_weight", int64_t{3}}}));
  CHECK(s.policy == "least_tokens");
  CHECK(s.token_weight == 3.0);  // an integer fills a real field
  CHECK(s.attention_weight == 1.0);
  CHECK(error_of(changed(boot, {{"policy", std::string("least_tokens")}, {"token_weight", -1.0}})) ==
        "token_weight: expected a number from 0 to 1000000, got -1");
  CHECK(error_of(changed(boot, {{"policy", std::string("fastest")}})) ==
        "policy: expected one of deepseek, least_tokens, round_robin, got \"fastest\"");
  CHECK(error_of(changed(boot, {{"policy", int64_t{2}}})) ==
        "policy: expected one of deepseek, least_tokens, round_robin, got an integer (2)");
  CHECK(error_of(changed(boot, {{"speed", true}})) ==
        "speed: unknown key (policy, attention_weight, token_weight, drained, drain, undrain)");
  CHECK(error_of(changed(boot, {{"attention_weight", 0.0}, {"token_weight", int64_t{0}}})) ==
        "token_weight: attention_weight and token_weight are both 0; one must weigh");
}

TEST_CASE("live config: drain and undrain ranks, never all of them") {
  const decode_balancer_settings boot{.num_ranks = 3};
  decode_balancer_settings s = ok(changed(boot, {{"drain", int64_t{2}}, {"drain", int64_t{0}}}));
  CHECK(s.drained == std::vector<int64_t>{0, 2});
  s = ok(changed(s, {{"drain", int64_t{2}}, {"undrain", int64_t{0}}, {"undrain", int64_t{1}}}));
  CHECK(s.drained == std::vector<int64_t>{2});  // draining twice and undraining an undrained rank: no-ops
  CHECK(error_of(changed(s, {{"drain", int64_t{3}}})) == "drain: expected an integer from 0 to 2, got 3");
  CHECK(error_of(changed(s, {{"drain", int64_t{0}}, {"drain", int64_t{1}}})) ==
        "drained: every rank would be drained; at least one must take new work");
  CHECK(ok(changed(s, {{"drained", std::vector<int64_t>{1, 0, 1}}})).drained == std::vector<int64_t>{0, 1});
  CHECK(error_of(changed(s, {{"drained", std::vector<int64_t>{0, 5}}})) ==
        "drained: rank 5 is not one of 0..2");
  CHECK(error_of(changed(s, {{"drained", int64_t{1}}})) ==
        "drained: expected a list of rank indices, got an integer (1)");
}

TEST_CASE("live config: the decode balancer and the queue") {
  const decode_balancer_settings d =
    ok(changed(decode_balancer_settings{.num_ranks = 2},
               {{"policy", std::string("power_of_two")}, {"seed", int64_t{9}}, {"kv_weight", 0.5}}));
  CHECK(d.policy == "power_of_two");
  CHECK(d.seed == 9);
  CHECK(d.kv_weight == 0.5);
  CHECK(error_of(changed(d, {{"seed", -1.0}})) == "seed: expected an integer, got a number (-1)");
  const request_queue_settings q = ok(changed(request_queue_settings{}, {{"max_running", int64_t{8}}}));
  CHECK(q.max_running == 8);
  CHECK(q.max_queued == 256);
  CHECK(error_of(changed(q, {{"max_queued", int64_t{0}}})) ==
        "max_queued: expected an integer from 1 to 1000000, got 0");
  CHECK(error_of(changed(q, {{"max_running", 2.5}})) ==
        "max_running: expected an integer, got a number (2.5)");
}

TEST_CASE("live config: a target's fields restore it, and print as the wire shows them") {
  const prefill_balancer_settings p =
    ok(changed(prefill_balancer_settings{.num_ranks = 4}, {{"policy", std::string("round_robin")},
                                                           {"attention_weight", 0.25},
                                                           {"drained", std::vector<int64_t>{3, 1}}}));
  const prefill_balancer_settings back = ok(changed(prefill_balancer_settings{.num_ranks = 4}, fields_of(p)));
  CHECK(back.policy == "round_robin");
  CHECK(back.attention_weight == 0.25);
  CHECK(back.drained == std::vector<int64_t>{1, 3});
  std::string text;
  for (const config_field& f : fields_of(p))
    text += f.key + "=" + to_string(f.value) + " ";
  CHECK(text == "policy=\"round_robin\" attention_weight=0.25 token_weight=1 drained=[1, 3] ");
  const decode_balancer_settings d{.policy = "round_robin", .seed = 4, .num_ranks = 2};
  const decode_balancer_settings d2 = ok(changed(decode_balancer_settings{.num_ranks = 2}, fields_of(d)));
  CHECK(d2.policy == "round_robin");
  CHECK(d2.seed == 4);
}

TEST_CASE("live config: the expert balancer, validated whole, restored by its own fields") {
  const expert_balancer_settings boot{.num_logical = 16};
  CHECK(boot.policy == "hierarchical");
  CHECK(boot.interval_steps == 1000);
  const expert_balancer_settings e = ok(changed(boot, {{"policy", std::string("global")},
                                                       {"interval_steps", int64_t{0}},
                                                       {"redundant_experts", int64_t{4}},
                                                       {"minimal_movement", false}}));
  CHECK(e.policy == "global");
  CHECK(e.interval_steps == 0);  // only when asked
  CHECK(e.redundant_experts == 4);
  CHECK_FALSE(e.minimal_movement);
  // a bad field refuses the whole change: the valid policy before it does not apply
  CHECK(error_of(changed(e, {{"policy", std::string("off")}, {"redundant_experts", int64_t{17}}})) ==
        "redundant_experts: expected an integer from 0 to 16, got 17");
  CHECK(error_of(changed(e, {{"policy", std::string("eplb")}})) ==
        "policy: expected one of hierarchical, global, off, got \"eplb\"");
  CHECK(error_of(changed(e, {{"window_steps", int64_t{0}}})) ==
        "window_steps: expected an integer from 1 to 10000000, got 0");
  CHECK(error_of(changed(e, {{"minimal_movement", int64_t{1}}})) ==
        "minimal_movement: expected true or false, got an integer (1)");
  CHECK(error_of(changed(e, {{"replicas", int64_t{1}}})) ==
        "replicas: unknown key (policy, interval_steps, window_steps, redundant_experts, minimal_movement)");
  const expert_balancer_settings back = ok(changed(boot, fields_of(e)));
  CHECK(back.policy == "global");
  CHECK(back.interval_steps == 0);
  CHECK(back.window_steps == 1000);
  CHECK(back.redundant_experts == 4);
  CHECK_FALSE(back.minimal_movement);
}
