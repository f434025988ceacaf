// tests/actors/test_expert_balancer.cpp
// The expert balancer (EPLB) on the tiny model over 2P+4D with 4 redundant slots: a rebalance
// asked mid-load installs a new placement on every rank of each group at once, the greedy
// outputs equal the single-rank generator's (the reference backend's expert outputs do not
// depend on where an expert lives) and nothing is lost; the periodic check rebalances by
// itself after interval_steps; a rank killed during a rebalance leaves every rank of the group
// on one placement; a killed balancer comes back with its configuration and plans from the
// ranks' placement.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "actors/expert_balancer.hpp"
#include "actors/rank/ep_member.hpp"
#include "recovery_fixture.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

topology_config eplb_topology() {
  topology_config topo = recovery_topology();
  topo.decode_ranks = 4;
  topo.redundant_experts = 4;  // 20 slots: 10 per prefill rank, 5 per decode rank
  topo.expert_balancer = "hierarchical";
  topo.eplb_interval_steps = 0;  // only when asked, unless a case says otherwise
  return topo;
}

struct expert_balancer_case : recovery_case {
  expert_balancer_actor balancer(const cluster& c, const std::string& role) {
    return caf::actor_cast<expert_balancer_actor>(ask<caf::actor>(
      c.supervisor, lookup_atom::value, std::string("expert_balancer"), int64_t{role == "prefill" ? 0 : 1}));
  }

  rebalance_report rebalance(const cluster& c, const std::string& role) {
    const expert_balancer_actor b = balancer(c, role);
    REQUIRE(b);
    rebalance_report r;
    self->request(b, 30s, rebalance_atom::value)
      .receive([&](const rebalance_report& x) { r = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return r;
  }

  // The placement every rank of the group uses (they must agree), as its ranks report it. Ranks
  // asked one after another may straddle a switch step the group is running to: asked again
  // (at most 200 times) until one round agrees.
  placement_report group_placement(const cluster& c, const std::string& kind, int64_t num_ranks) {
    std::vector<placement_report> all;
    const auto agree = [&] {
      return std::all_of(all.begin(), all.end(), [&](const placement_report& p) {
        return p.epoch == all[0].epoch && p.slot_expert == all[0].slot_expert;
      });
    };
    for (int tries = 0; tries < 200 && (all.empty() || !agree()); ++tries) {
      all.clear();
      for (int64_t r = 0; r < num_ranks; ++r) {
        const auto rank = ask<caf::actor>(c.supervisor, lookup_atom::value, kind, r);
        REQUIRE(rank);
        all.push_back(ask<placement_report>(caf::actor_cast<ep_member_actor>(rank), placement_atom::value));
      }
    }
    for (int64_t r = 1; r < num_ranks; ++r) {
      CAPTURE(r);
      CHECK(all[r].epoch == all[0].epoch);
      CHECK(all[r].slot_expert == all[0].slot_expert);
    }
    return all[0];
  }

  // A committed placement holds from its switch step on, a step or two ahead: runs requests one
  // at a time (each gives both groups a few steps; at most 8, each checked against the
  // generator) until every rank of the group uses placement `epoch`.
  placement_report in_force(const cluster& c, const std::string& kind, int64_t num_ranks, uint64_t epoch) {
    placement_report p = group_placement(c, kind, num_ranks);
    for (uint32_t tries = 0; tries < 8 && p.epoch != epoch; ++tries) {
      const request_spec spec = greedy_requests(1, 100 + tries)[0];
      CHECK(run_one(c, spec).output_ids == ref_gen->run(spec.prompt_ids, spec.sampling).output_ids);
      p = group_placement(c, kind, num_ranks);
    }
    CHECK(p.epoch == epoch);
    return p;
  }

  // Each rank of the group holds, in memory of its own, one copy of each expert its slots name
  // (`copy_bytes` each); a copy it sends a peer is the checkpoint's expert, element for
  // element; an expert it does not hold it refuses to send.
  void check_held(const cluster& c, const std::string& kind, const placement_report& p, int64_t num_ranks,
                  const model_weights& w, int64_t copy_bytes) {
    for (int64_t r = 0; r < num_ranks; ++r) {
      CAPTURE(r);
      const auto rank =
        caf::actor_cast<ep_member_actor>(ask<caf::actor>(c.supervisor, lookup_atom::value, kind, r));
      REQUIRE(rank);
      int64_t copies = 0;
      for (size_t l = 0; l < p.slot_expert.size(); ++l) {
        const std::vector<int32_t>& row = p.slot_expert[l];
        if (row.empty())
          continue;
        const auto k = static_cast<int64_t>(row.size()) / num_ranks;
        const std::set<int32_t> mine(row.begin() + r * k, row.begin() + (r + 1) * k);
        copies += static_cast<int64_t>(mine.size());
        const int32_t held = *mine.begin();
        const expert_blob blob = ask<expert_blob>(rank, experts_atom::value, static_cast<int64_t>(l), held);
        const std::shared_ptr<const expert_copy> copy = decode_expert(blob.bytes);
        const mlp_weights& want = w.layers[l].moe.experts[static_cast<size_t>(held)];
        int64_t differ = 0;
        for (const auto& [got_p, want_p] : {std::pair{&copy->weights.gate_proj, &want.gate_proj},
                                            std::pair{&copy->weights.up_proj, &want.up_proj},
                                            std::pair{&copy->weights.down_proj, &want.down_proj}})
          for (int64_t o = 0; o < want_p->out_features; ++o)
            for (int64_t i = 0; i < want_p->in_features; ++i)
              differ += got_p->at(o, i) != want_p->at(o, i) ? 1 : 0;
        CHECK(differ == 0);
        int32_t absent = 0;
        while (mine.count(absent) != 0)
          ++absent;
        bool refused = false;
        self->request(rank, 10s, experts_atom::value, static_cast<int64_t>(l), absent)
          .receive([](const expert_blob&) {}, [&](caf::error&) { refused = true; });
        CHECK(refused);
      }
      CHECK(ask<rank_stats>(caf::actor_cast<caf::actor>(rank), stats_atom::value).expert_bytes ==
            copies * copy_bytes);
    }
  }

  // Every logical expert of every MoE layer has a slot, and each rank holds as many slots.
  static void check_covers(const placement_report& p, int64_t num_logical, int64_t num_slots) {
    int64_t num_moe = 0;
    for (const std::vector<int32_t>& row : p.slot_expert) {
      if (row.empty())
        continue;
      ++num_moe;
      CHECK(static_cast<int64_t>(row.size()) == num_slots);
      CHECK(static_cast<int64_t>(std::set<int32_t>(row.begin(), row.end()).size()) == num_logical);
    }
    CHECK(num_moe == 2);  // the tiny model's MoE layers
  }
};

}  // namespace

TEST_CASE_FIXTURE(expert_balancer_case,
                  "expert balancer: a rebalance mid-load moves replicas on every rank at one step, the "
                  "greedy outputs stay the generator's") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = eplb_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  const placement_report before = group_placement(c, "decode_rank", 4);
  CHECK(before.epoch == 0);
  check_covers(before, 16, 20);
  // nothing routed yet: refused, the placement stays
  const rebalance_report early = rebalance(c, "decode");
  CHECK(early.error == "no tokens were routed in the window yet");
  CHECK(group_placement(c, "decode_rank", 4).epoch == 0);

  const std::vector<request_spec> specs = greedy_requests(32, 21);
  std::map<uint64_t, size_t> index_of;
  std::vector<rebalance_report> done;
  std::map<uint64_t, collected> got = run_load(c, specs, index_of, [&](size_t num_done) {
    if (num_done == 8 || num_done == 20)
      for (const char* role : {"decode", "prefill"})
        done.push_back(rebalance(c, role));
  });
  check_outputs(specs, index_of, got);
  REQUIRE(done.size() == 4);
  // a tiny expert: gate, up [I, D] and down [D, I] in the builder's dtype, no scales
  const model_config& mc = weights->config;
  const int64_t expert_bytes = 3 * mc.moe_intermediate_size * mc.hidden_size *
                               dtype_size(weights->layers[1].moe.experts[0].gate_proj.type);
  for (const rebalance_report& r : done) {
    CAPTURE(r.role);
    CHECK(r.error == "");
    CHECK(r.balancedness_after.size() == 2);
    for (size_t l = 0; l < r.balancedness_after.size(); ++l)  // EPLB's plan is at least as even
      CHECK(r.balancedness_after[l] >= r.balancedness_before[l] - 1e-9);
    CHECK(r.moved_bytes == r.moved_experts * expert_bytes);
    CHECK(r.plain_moved_bytes >= r.moved_bytes);  // minimal movement copies no more than the plan
  }
  // each group's second rebalance holds on every rank
  const placement_report decode_after = in_force(c, "decode_rank", 4, done[2].epoch);
  const placement_report prefill_after = in_force(c, "prefill_rank", 2, done[3].epoch);
  CHECK(decode_after.epoch >= 1);
  CHECK(decode_after.slot_expert != before.slot_expert);
  check_covers(decode_after, 16, 20);
  check_covers(prefill_after, 16, 20);
  // a copy: each projection's f32 [I, D] or [D, I] at a 64-byte boundary of its own
  const int64_t copy_bytes = 3 * ((expert_bytes / 3 + 63) / 64 * 64);
  check_held(c, "decode_rank", decode_after, 4, *weights, copy_bytes);
  check_held(c, "prefill_rank", prefill_after, 2, *weights, copy_bytes);
  check_queue_empty(c);
  // the stats name what happened
  expert_balancer_stats s;
  self->request(balancer(c, "decode"), 10s, stats_atom::value)
    .receive([&](const expert_balancer_stats& x) { s = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(s.rebalances == 2);
  CHECK(s.failed == 1);  // the one before any load
  CHECK(s.epoch == decode_after.epoch);
}

TEST_CASE_FIXTURE(expert_balancer_case,
                  "expert balancer: every interval_steps steps it rebalances by itself") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = eplb_topology();
  topo.eplb_interval_steps = 4;
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  const std::vector<request_spec> specs = greedy_requests(24, 22);
  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_load(c, specs, index_of, [](size_t) {});
  check_outputs(specs, index_of, got);
  // its check runs each second: wait (bounded) for the rebalance it starts
  expert_balancer_stats s;
  for (int tries = 0; tries < 100 && s.rebalances == 0; ++tries) {
    self->request(balancer(c, "decode"), 10s, stats_atom::value)
      .receive([&](const expert_balancer_stats& x) { s = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    if (s.rebalances == 0)
      self->receive(caf::after(50ms) >> [] {});
  }
  CHECK(s.rebalances >= 1);
  CHECK(s.balancedness.size() == 2);
  in_force(c, "decode_rank", 4, s.epoch);
}

TEST_CASE_FIXTURE(expert_balancer_case,
                  "expert balancer: a rank killed during a rebalance leaves its group on one placement, a "
                  "killed balancer keeps its configuration and plans from the ranks") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = eplb_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  const std::vector<request_spec> specs = greedy_requests(32, 23);
  std::map<uint64_t, size_t> index_of;
  std::optional<rebalance_report> interrupted;
  std::map<uint64_t, collected> got = run_load(c, specs, index_of, [&](size_t num_done) {
    if (num_done != 10)
      return;
    // the rebalance is under way (its questions to the ranks are out) when the kill lands
    const expert_balancer_actor b = balancer(c, "decode");
    auto rp = self->request(b, 30s, rebalance_atom::value);
    self->request(c.supervisor, 10s, kill_atom::value, std::string("decode_rank"), int64_t{2})
      .receive([&](bool killed) { CHECK(killed); }, [&](caf::error& e) { FAIL(sys.render(e)); });
    rp.receive([&](const rebalance_report& r) { interrupted = r; },
               [&](caf::error& e) { FAIL(sys.render(e)); });
  });
  check_outputs(specs, index_of, got);
  REQUIRE(interrupted);
  const placement_report after_kill = group_placement(c, "decode_rank",
                                                      4);  // one placement, whatever happened
  check_covers(after_kill, 16, 20);
  // the balancer: configured, killed, and its successor has the change and plans from the ranks
  versioned_config v;
  self
    ->request(c.supervisor, 10s, configure_atom::value, std::string("expert_balancer"), int64_t{1},
              config_fields{{"policy", std::string("global")}, {"minimal_movement", false}})
    .receive([&](const versioned_config& x) { v = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(v.epoch == 1);
  const caf::actor old = caf::actor_cast<caf::actor>(balancer(c, "decode"));
  self->request(c.supervisor, 10s, kill_atom::value, std::string("expert_balancer"), int64_t{1})
    .receive([&](bool killed) { CHECK(killed); }, [&](caf::error& e) { FAIL(sys.render(e)); });
  const auto fresh = caf::actor_cast<expert_balancer_actor>(ask<caf::actor>(
    c.supervisor, lookup_atom::value, std::string("expert_balancer"), int64_t{1}, old.address()));
  REQUIRE(fresh);
  versioned_config now;
  self->request(fresh, 10s, config_atom::value)
    .receive([&](const versioned_config& x) { now = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(now.epoch == 1);
  bool global = false;
  for (const config_field& f : now.fields)
    global = global || (f.key == "policy" && std::get<std::string>(f.value) == "global");
  CHECK(global);
  // more load, then a rebalance by the successor: above the epoch the ranks hold
  const std::vector<request_spec> more = greedy_requests(12, 24);
  std::map<uint64_t, size_t> more_index;
  std::map<uint64_t, collected> more_got = run_load(c, more, more_index, [](size_t) {});
  check_outputs(more, more_index, more_got);
  const rebalance_report r = rebalance(c, "decode");
  CHECK(r.error == "");
  const placement_report last = in_force(c, "decode_rank", 4, r.epoch);
  CHECK(r.epoch >= after_kill.epoch);
  check_covers(last, 16, 20);
  check_queue_empty(c);
}

TEST_CASE_FIXTURE(expert_balancer_case,
                  "expert moves: a rank copies what a change gives it from a peer that holds it, and "
                  "prepares no change it lacks an expert of, and a killed copy engine is made again") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = eplb_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  const auto rank0 = caf::actor_cast<ep_member_actor>(
    ask<caf::actor>(c.supervisor, lookup_atom::value, std::string("decode_rank"), int64_t{0}));
  REQUIRE(rank0);
  const placement_report now = ask<placement_report>(rank0, placement_atom::value);
  // 20 slots over 4 ranks, slot s holding expert s mod 16: rank 0 holds 0-4, rank 1 5-9. The
  // change swaps slots 0 and 5 of the first MoE layer: rank 0 then lacks expert 5, which only
  // rank 1 holds.
  const int64_t L = weights->config.first_k_dense_replace;
  auto placements = std::make_shared<std::vector<layer_placement>>();
  for (size_t l = 0; l < now.slot_expert.size(); ++l) {
    std::vector<int32_t> row = now.slot_expert[l];
    if (static_cast<int64_t>(l) == L)
      std::swap(row[0], row[5]);
    placements->push_back(row.empty() ? layer_placement{} : make_layer_placement(row, 4, 16));
  }
  const placement_change change{
    .epoch = now.epoch + 1, .membership_first_step = now.membership_first_step, .placements = placements};
  const int64_t held_before =
    ask<rank_stats>(caf::actor_cast<caf::actor>(rank0), stats_atom::value).expert_bytes;
  const auto refused = [&](auto... xs) {  // both messages answer an int64_t
    std::string why;
    self->request(rank0, 10s, xs...).receive([](int64_t) {}, [&](caf::error& e) { why = sys.render(e); });
    return why;
  };
  CHECK(refused(placement_atom::value, change).find("no copy of expert 5 of layer") != std::string::npos);
  const model_config& mc = weights->config;
  const int64_t expert_bytes = 3 * mc.moe_intermediate_size * mc.hidden_size *
                               dtype_size(weights->layers[L].moe.experts[0].gate_proj.type);
  CHECK(ask<int64_t>(rank0, experts_atom::value, change) == expert_bytes);  // expert 5, from rank 1
  const int64_t staged = ask<rank_stats>(caf::actor_cast<caf::actor>(rank0), stats_atom::value).expert_bytes;
  CHECK(staged > held_before);
  CHECK(ask<int64_t>(rank0, experts_atom::value, change) == 0);  // staged already: nothing to copy
  // now it holds every expert of the change: phase one is answered; an abort drops the copies
  CHECK(ask<int64_t>(rank0, placement_atom::value, change) >= 0);
  CHECK(ask<rank_stats>(caf::actor_cast<caf::actor>(rank0), stats_atom::value).expert_bytes == staged);
  self->send(rank0, placement_atom::value, change.epoch);
  CHECK(ask<rank_stats>(caf::actor_cast<caf::actor>(rank0), stats_atom::value).expert_bytes == held_before);
  // a change for another membership is refused before anything is copied
  placement_change stale = change;
  stale.membership_first_step += 1;
  CHECK(refused(experts_atom::value, stale).find("another membership") != std::string::npos);
  // the placement in force never changed
  CHECK(ask<placement_report>(rank0, placement_atom::value).epoch == now.epoch);
  // with the cluster's copy engine killed, the holder encodes and rank 0 decodes on their own
  // threads, each making itself a new engine: the same copy comes
  REQUIRE(c.copy_engine);
  self->monitor(c.copy_engine);
  self->send_exit(c.copy_engine, caf::exit_reason::kill);
  self->receive([](const caf::down_msg&) {},
                caf::after(10s) >> [] { FAIL("the copy engine did not go down"); });
  CHECK(ask<int64_t>(rank0, experts_atom::value, change) == expert_bytes);
  CHECK(ask<rank_stats>(caf::actor_cast<caf::actor>(rank0), stats_atom::value).expert_bytes == staged);
  self->send(rank0, placement_atom::value, change.epoch);
  CHECK(ask<int64_t>(rank0, experts_atom::value, change) == expert_bytes);  // on the new engines
}
