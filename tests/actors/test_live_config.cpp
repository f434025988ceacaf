// tests/actors/test_live_config.cpp
// Live configuration by actor messages, through the supervisor, over the tiny model on 2P+2D:
// drained ranks take no new work while their running work finishes, a change of policy shows in
// where requests go, an invalid change is refused naming the field and changes nothing, and the
// balancers and the queue come back from a kill with the configuration they had.
#include <doctest/doctest.h>

#include "actors/errors.hpp"
#include "recovery_fixture.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

struct live_config_case : recovery_case {
  // A change through the supervisor: the answer, or the error's text.
  std::variant<versioned_config, std::string> configure(const cluster& c, const std::string& target,
                                                        config_fields change) {
    std::variant<versioned_config, std::string> out = std::string("no answer");
    self->request(c.supervisor, 10s, configure_atom::value, target, int64_t{0}, std::move(change))
      .receive([&](versioned_config& v) { out = std::move(v); },
               [&](caf::error& e) { out = e == serve_errc::invalid ? error_text(e) : sys.render(e); });
    return out;
  }

  versioned_config configured(const cluster& c, const std::string& target, config_fields change) {
    auto r = configure(c, target, std::move(change));
    if (auto* e = std::get_if<std::string>(&r))
      FAIL("refused: " << *e);
    return std::get<versioned_config>(r);
  }

  // Requests taken so far by rank `index` of `kind` (the instance living now).
  int64_t taken(const cluster& c, const std::string& kind, int64_t index) {
    return ask<rank_stats>(c.supervisor, stats_atom::value, kind, index).num_requests;
  }

  // The value of `key` in a configuration.
  static config_value field(const versioned_config& v, const std::string& key) {
    for (const config_field& f : v.fields)
      if (f.key == key)
        return f.value;
    FAIL("no field " << key);
    return {};
  }

  // A successor of `kind` other than `old`.
  caf::actor successor(const cluster& c, const std::string& kind, const caf::actor& old) {
    return ask<caf::actor>(c.supervisor, lookup_atom::value, kind, int64_t{0}, old.address());
  }
};

}  // namespace

TEST_CASE_FIXTURE(live_config_case,
                  "live config: a drained rank takes no new work, its running work finishes, undrained "
                  "it takes work again") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = recovery_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  // A: drained mid-load (after the 4th answer): every request still ends with its tokens
  const std::vector<request_spec> a = greedy_requests(24, 5);
  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_load(c, a, index_of, [&](size_t num_done) {
    if (num_done != 4)
      return;
    CHECK(configured(c, "decode_balancer", {{"drain", int64_t{1}}}).epoch == 1);
    CHECK(configured(c, "prefill_balancer", {{"drain", int64_t{0}}}).epoch == 1);
  });
  check_outputs(a, index_of, got);
  const int64_t decode1 = taken(c, "decode_rank", 1), prefill0 = taken(c, "prefill_rank", 0);
  const int64_t decode0 = taken(c, "decode_rank", 0), prefill1 = taken(c, "prefill_rank", 1);
  CHECK(decode1 > 0);  // it had work before the drain
  // B: drained, 8 more requests one after another go to the other ranks
  const std::vector<request_spec> b = greedy_requests(8, 6);
  for (const request_spec& spec : b)
    CHECK(run_one(c, spec).output_ids == ref_gen->run(spec.prompt_ids, spec.sampling).output_ids);
  CHECK(taken(c, "decode_rank", 1) == decode1);
  CHECK(taken(c, "prefill_rank", 0) == prefill0);
  CHECK(taken(c, "decode_rank", 0) == decode0 + 8);
  CHECK(taken(c, "prefill_rank", 1) == prefill1 + 8);
  // C: undrained, round robin: each rank takes every other request
  configured(c, "decode_balancer", {{"undrain", int64_t{1}}, {"policy", std::string("round_robin")}});
  configured(c, "prefill_balancer", {{"undrain", int64_t{0}}, {"policy", std::string("round_robin")}});
  for (const request_spec& spec : greedy_requests(4, 7))
    CHECK(run_one(c, spec).output_ids == ref_gen->run(spec.prompt_ids, spec.sampling).output_ids);
  CHECK(taken(c, "decode_rank", 1) == decode1 + 2);
  CHECK(taken(c, "decode_rank", 0) == decode0 + 8 + 2);
  CHECK(taken(c, "prefill_rank", 0) == prefill0 + 2);
  check_ranks_idle(c);
  check_queue_empty(c);
  c.stop();
}

TEST_CASE_FIXTURE(live_config_case,
                  "live config: an invalid change changes nothing, and a killed balancer or queue comes "
                  "back with the configuration it had") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = recovery_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  const versioned_config d = configured(c, "decode_balancer",
                                        {{"policy", std::string("round_robin")}, {"seed", int64_t{5}}});
  CHECK(d.target == "decode_balancer");
  CHECK(d.epoch == 1);
  CHECK(configured(c, "request_queue", {{"max_running", int64_t{3}}}).epoch == 1);
  // refused whole: the valid policy field before the bad weight does not apply either
  auto refused = configure(c, "decode_balancer",
                           {{"policy", std::string("power_of_two")}, {"kv_weight", -1.0}});
  REQUIRE(std::holds_alternative<std::string>(refused));
  CHECK(std::get<std::string>(refused) == "kv_weight: expected a number from 0 to 1000000, got -1");
  refused = configure(c, "prefill_rank", {{"policy", std::string("x")}});
  REQUIRE(std::holds_alternative<std::string>(refused));
  CHECK(std::get<std::string>(refused) == "target: prefill_rank 0 takes no configuration");
  versioned_config now = ask<versioned_config>(c.decode_balancer, config_atom::value);
  CHECK(now.epoch == 1);
  CHECK(field(now, "policy") == config_value(std::string("round_robin")));
  // killed, each one's successor starts with what it had
  for (const char* kind : {"decode_balancer", "request_queue", "prefill_balancer"})
    CHECK(ask<bool>(c.supervisor, kill_atom::value, std::string(kind), int64_t{0}));
  const auto balancer = caf::actor_cast<decode_balancer_actor>(
    successor(c, "decode_balancer", caf::actor_cast<caf::actor>(c.decode_balancer)));
  const auto queue =
    caf::actor_cast<request_queue_actor>(successor(c, "request_queue", caf::actor_cast<caf::actor>(c.queue)));
  REQUIRE(balancer);
  REQUIRE(queue);
  // the prefill balancer back too: a request handed to the dying one would be the client's to
  // resume (as a connection's bridge does), and this test's client does not
  REQUIRE(successor(c, "prefill_balancer", caf::actor_cast<caf::actor>(c.prefill_balancer)));
  now = ask<versioned_config>(balancer, config_atom::value);
  CHECK(now.epoch == 1);
  CHECK(field(now, "policy") == config_value(std::string("round_robin")));
  CHECK(field(now, "seed") == config_value(int64_t{5}));
  CHECK(field(ask<versioned_config>(queue, config_atom::value), "max_running") == config_value(int64_t{3}));
  const auto all = ask<std::vector<versioned_config>>(c.supervisor, config_atom::value);
  REQUIRE(all.size() == 5);  // and the expert balancer of each EP group, untouched
  CHECK(all[0].target == "request_queue");
  CHECK(all[1].target == "prefill_balancer");
  CHECK(all[1].epoch == 0);
  CHECK(all[2].target == "decode_balancer");
  CHECK(all[2].epoch == 1);
  CHECK(all[3].target == "expert_balancer");
  CHECK(all[4].target == "expert_balancer");
  CHECK(all[4].epoch == 0);
  // the restored policies act: round robin puts 2 of 4 one-at-a-time requests on each decode
  // rank (deepseek's would put all 4 on the empty rank 0)
  const int64_t before0 = taken(c, "decode_rank", 0), before1 = taken(c, "decode_rank", 1);
  for (const request_spec& spec : greedy_requests(4, 8)) {
    const session_result r = run_one(queue, spec);
    CHECK(r.error == "");
    CHECK(r.output_ids == ref_gen->run(spec.prompt_ids, spec.sampling).output_ids);
  }
  CHECK(taken(c, "decode_rank", 0) == before0 + 2);
  CHECK(taken(c, "decode_rank", 1) == before1 + 2);
  // and the queue's max_running of 3 holds: 12 at once, never more than 3 running
  const std::vector<request_spec> burst = greedy_requests(12, 9);
  for (const request_spec& spec : burst)
    self->request(queue, 10s, submit_atom::value, spec)
      .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  size_t num_done = 0;
  int64_t most_running = 0;
  bool timed_out = false;
  while (num_done < burst.size() && !timed_out)
    self->receive([&](token_atom, const stream_chunk&) {},
                  [&](done_atom, const session_result& r) {
                    CHECK(r.error == "");
                    ++num_done;
                    most_running = std::max(most_running,
                                            ask<queue_stats>(queue, stats_atom::value).num_running);
                  },
                  caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  CHECK(most_running <= 3);
  CHECK(most_running >= 1);
  c.stop();
}
