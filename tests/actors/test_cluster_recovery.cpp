// tests/actors/test_cluster_recovery.cpp
// The cluster under load while its supervisor's restartable children are killed (2P+2D, the tiny
// model, greedy): the decode balancer (it rebuilds its bookings from the decode ranks), killed
// several times mid-load (the prefill balancer and the queue, whose requests the server's
// bridges resume, are killed in tests/net/test_rpc_server_recovery.cpp). Every request still
// ends once, with the single-rank generator's tokens, a gapless stream, and every KV block and booking back. Over
// 1P+1D (groups of one) the ranks themselves are killed: their requests are placed again by
// their sessions (prompt + tokens so far re-prefilled) and still give the generator's tokens, up
// to max_migrations. Over 2P+2D a killed rank rejoins its group in a new epoch: its peers abandon
// the step they were in and run it again. Decode ranks that overcommit their KV
// (new_token_ratio < 1) preempt and recompute requests, again with the generator's tokens.
// Shared helpers: recovery_fixture.hpp; crashes at fixed points: test_fault_points.cpp.
#include <doctest/doctest.h>

#include "recovery_fixture.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

TEST_CASE_FIXTURE(recovery_case, "recovery: killing the decode balancer under load loses nothing") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(9).build(testing::tiny_config(1000)));
  const topology_config topo = recovery_topology();
  const std::vector<request_spec> specs = greedy_requests(48, 17);
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});

  std::map<uint64_t, size_t> index_of;
  // a kill after every 6th final answer: 4 in all
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {"decode_balancer"}, {0}, 6, 4, index_of);
  generator& gen = reference(weights, tok, topo);
  check_outputs(specs, index_of, got);
  for (const auto& rank : c.prefill_ranks) {
    const rank_stats s = idle_stats(rank);
    CHECK(s.num_free_blocks == s.num_blocks);
  }
  for (const auto& rank : c.decode_ranks) {
    const rank_stats s = idle_stats(rank);
    CHECK(s.num_running == 0);
    CHECK(s.num_free_blocks == s.num_blocks);
    CHECK(ask<rank_bookings>(rank, bookings_atom::value).request_ids.empty());
  }
  const auto balancer = caf::actor_cast<decode_balancer_actor>(
    ask<caf::actor>(c.supervisor, lookup_atom::value, std::string("decode_balancer"), int64_t{0}));
  REQUIRE(balancer);
  CHECK(balancer != c.decode_balancer);  // a restarted one
  CHECK(ask<std::vector<int64_t>>(balancer, stats_atom::value) == std::vector<int64_t>{0, 0});
  check_queue_empty(c);
  std::map<std::string, int64_t> restarts = restarts_by_kind(c);
  CHECK(restarts["decode_balancer"] == 4);
  CHECK(restarts["prefill_rank"] == 0);
  // the new balancer books again: one more request after the load
  const session_result last = run_one(c, specs[0]);
  CHECK(last.output_ids == gen.run(specs[0].prompt_ids, specs[0].sampling).output_ids);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "recovery: killing ranks of expert-parallel groups of two under load: the survivors "
                  "abandon the step, the dead rank rejoins, and every request gives the generator's tokens") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = recovery_topology();
  // 4 ranks die, and a request placed again after one death can be on the next rank to die
  // (seen once under ASan: a request met all 4 and ended unavailable at the default limit of 3)
  topo.max_migrations = 4;
  const std::vector<request_spec> specs = greedy_requests(48, 41);
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  std::map<uint64_t, size_t> index_of;
  // a kill after every 5th final answer: each rank of both groups, in turn
  std::map<uint64_t, collected> got = run_with_kills(
    c, specs, {"decode_rank", "prefill_rank", "decode_rank", "prefill_rank"}, {0, 1, 1, 0}, 5, 4, index_of);
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);
  int64_t migrated = 0;
  for (const auto& [id, g] : got)
    migrated += g.result.num_migrations > 0 ? 1 : 0;
  MESSAGE("requests placed again: " << migrated << " of " << specs.size());
  CHECK(migrated > 0);
  check_ranks_idle(c);
  check_queue_empty(c);
  std::map<std::string, int64_t> restarts = restarts_by_kind(c);
  CHECK(restarts["decode_rank"] == 2);
  CHECK(restarts["prefill_rank"] == 2);
  // the groups still step together: one more request after the load
  const session_result last = run_one(c, specs[0]);
  CHECK(last.output_ids == ref_gen->run(specs[0].prompt_ids, specs[0].sampling).output_ids);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case, "recovery: killing the ranks of 1P+1D under load re-places their requests") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = one_rank_groups();
  // Each rank death places a request again at most once, and 4 ranks die: with a limit of 4 no
  // request may end unavailable (a request waiting out a restart can meet all 4, rarely).
  topo.max_migrations = 4;
  const std::vector<request_spec> specs = greedy_requests(40, 23);
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  std::map<uint64_t, size_t> index_of;
  // a kill after every 6th final answer: decode rank, prefill rank, decode balancer, in turn
  std::map<uint64_t, collected> got =
    run_with_kills(c, specs, {"decode_rank", "prefill_rank", "decode_balancer"}, {0, 0, 0}, 6, 6, index_of);
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);
  int64_t migrated = 0;
  for (const auto& [id, g] : got)
    migrated += g.result.num_migrations > 0 ? 1 : 0;
  MESSAGE("requests placed again: " << migrated << " of " << specs.size());
  CHECK(migrated > 0);  // the kills hit requests in flight
  const auto current = [&](const char* kind) {
    return ask<caf::actor>(c.supervisor, lookup_atom::value, std::string(kind), int64_t{0});
  };
  const auto prefill = caf::actor_cast<prefill_rank_actor>(current("prefill_rank"));
  const auto decode = caf::actor_cast<decode_rank_actor>(current("decode_rank"));
  REQUIRE(prefill);
  REQUIRE(decode);
  CHECK(prefill != c.prefill_ranks[0]);  // restarted ones
  CHECK(decode != c.decode_ranks[0]);
  const rank_stats ps = idle_stats(prefill);
  CHECK(ps.num_free_blocks == ps.num_blocks);
  const rank_stats ds = idle_stats(decode);
  CHECK(ds.num_running == 0);
  CHECK(ds.num_free_blocks == ds.num_blocks);
  CHECK(ask<rank_bookings>(decode, bookings_atom::value).request_ids.empty());
  const auto balancer = caf::actor_cast<decode_balancer_actor>(current("decode_balancer"));
  CHECK(ask<std::vector<int64_t>>(balancer, stats_atom::value) == std::vector<int64_t>{0});
  CHECK(ask<std::vector<int64_t>>(c.prefill_balancer, stats_atom::value) == std::vector<int64_t>{0});
  check_queue_empty(c);
  std::map<std::string, int64_t> restarts = restarts_by_kind(c);
  CHECK(restarts["decode_rank"] == 2);
  CHECK(restarts["prefill_rank"] == 2);
  CHECK(restarts["decode_balancer"] == 2);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case, "recovery: seeded requests placed again draw what they would have drawn") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = one_rank_groups();
  topo.max_migrations = 4;  // 4 ranks die: a request waiting out a restart can meet all 4, rarely
  std::vector<request_spec> specs = greedy_requests(30, 29);
  for (size_t i = 0; i < specs.size(); ++i) {  // sampled, with penalties on the tokens so far
    specs[i].sampling.temperature = 0.9f;
    specs[i].sampling.seed = 1000 + i;
    specs[i].sampling.frequency_penalty = 0.5f;
    specs[i].sampling.max_tokens = 8;
  }
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {"decode_rank", "prefill_rank"}, {0, 0}, 5, 4,
                                                     index_of);
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);  // the generator with the same seeds, never moved
  int64_t migrated = 0;
  for (const auto& [id, g] : got)
    migrated += g.result.num_migrations > 0 && g.result.output_ids.size() > 1 ? 1 : 0;
  MESSAGE("requests placed again after a token: " << migrated << " of " << specs.size());
  CHECK(migrated > 0);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "preemption: decode ranks that run out of KV recompute their youngest requests, and every "
                  "request still ends with the generator's tokens") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = recovery_topology();
  topo.prefill_ranks = 1;
  topo.kv_blocks = 16;  // 64 tokens a rank: a few requests' worth
  topo.max_running_requests = 8;
  topo.new_token_ratio = 0.1;  // books the prompt and a token or so: ranks overcommit
  std::vector<request_spec> specs = greedy_requests(40, 31);
  for (request_spec& s : specs)  // long enough outputs to outgrow what was booked
    s.sampling.max_tokens = 16;
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {}, {}, 1, 0, index_of);
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);  // none ended early at length, none mismatched
  int64_t preempted = 0, reprefilled = 0;
  for (const auto& [id, g] : got) {
    preempted += g.result.num_preemptions;
    reprefilled += g.result.num_reprefilled_tokens;
    CHECK(g.result.num_migrations == 0);  // not counted against max_migrations
  }
  MESSAGE("preemptions: " << preempted << ", tokens re-prefilled: " << reprefilled);
  CHECK(preempted > 0);
  CHECK(reprefilled > preempted);  // each one re-prefilled its prompt and its tokens so far
  int64_t rank_preemptions = 0;
  for (const auto& rank : c.decode_ranks) {
    const rank_stats s = idle_stats(rank);
    rank_preemptions += s.num_preemptions;
    CHECK(s.num_running == 0);
    CHECK(s.num_free_blocks == s.num_blocks);
    CHECK(ask<rank_bookings>(rank, bookings_atom::value).request_ids.empty());
  }
  CHECK(rank_preemptions == preempted);
  CHECK(ask<std::vector<int64_t>>(c.decode_balancer, stats_atom::value) == std::vector<int64_t>{0, 0});
  const rank_stats ps = idle_stats(c.prefill_ranks[0]);
  CHECK(ps.num_free_blocks == ps.num_blocks);
  check_queue_empty(c);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "recovery: past max_migrations a lost rank ends its requests with unavailable") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = one_rank_groups();
  topo.max_migrations = 0;
  std::vector<request_spec> specs = greedy_requests(8, 37);
  for (request_spec& s : specs)
    s.sampling.max_tokens = 12;
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  for (const request_spec& s : specs)
    self->request(c.queue, 10s, submit_atom::value, s)
      .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  size_t num_done = 0;
  int64_t unavailable = 0, completed = 0;
  bool killed = false, timed_out = false;
  while (num_done < specs.size() && !timed_out)
    self->receive(
      [&](token_atom, const stream_chunk&) {
        if (!killed)  // a request decodes: its rank goes
          self->request(c.supervisor, 10s, kill_atom::value, std::string("decode_rank"), int64_t{0})
            .receive([&](bool k) { killed = k; }, [&](caf::error& e) { FAIL(sys.render(e)); });
      },
      [&](done_atom, const session_result& r) {
        ++num_done;
        CHECK(r.num_migrations == 0);
        if (r.reason == finish_reason::error) {
          CHECK(r.error == "unavailable: its decode rank was lost after 0 migrations (at most 0)");
          ++unavailable;
        } else {
          CHECK(r.error == "");
          CHECK(r.output_ids.size() == 12);
          ++completed;
        }
      },
      caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  CHECK(killed);
  CHECK(unavailable > 0);
  CHECK(unavailable + completed == static_cast<int64_t>(specs.size()));
  const auto decode = caf::actor_cast<decode_rank_actor>(
    ask<caf::actor>(c.supervisor, lookup_atom::value, std::string("decode_rank"), int64_t{0}));
  REQUIRE(decode);
  const rank_stats ds = idle_stats(decode);
  CHECK(ds.num_free_blocks == ds.num_blocks);
  const rank_stats ps = idle_stats(c.prefill_ranks[0]);
  CHECK(ps.num_free_blocks == ps.num_blocks);
  check_queue_empty(c);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "recovery: a decode rank killed again as soon as it is back escalates within the "
                  "restart limits and stops the cluster, naming it") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  topology_config topo = recovery_topology();
  topo.max_restarts = 3;
  topo.restart_period_s = 60.0;
  scoped_cluster c = spawn_cluster(sys, tiny_weights(), tok, {.topology = topo, .reference = true});
  for (const request_spec& spec : greedy_requests(8, 5))  // under load
    self->request(c.queue, 10s, submit_atom::value, spec)
      .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  self->monitor(c.supervisor);
  self->monitor(c.queue);
  std::map<caf::actor_addr, std::string> downs;            // exit reasons of the monitored
  const auto hear = [&](std::chrono::milliseconds wait) {  // one message, if any comes within `wait`
    self->receive([&](caf::down_msg& dm) { downs[dm.source] = sys.render(dm.reason); },
                  [](token_atom, const stream_chunk&) {}, [](done_atom, const session_result&) {},
                  caf::after(wait) >> [] {});
  };
  const auto down = [&](const auto& a) { return downs.count(a.address()) > 0; };
  caf::actor rank = caf::actor_cast<caf::actor>(c.decode_ranks[0]);
  int64_t kills = 0;
  while (!down(c.supervisor) && kills < 10) {
    self->request(c.supervisor, 10s, kill_atom::value, std::string("decode_rank"), int64_t{0})
      .receive([&](bool) { ++kills; }, [&](caf::error&) {});
    // until it is back (a new handle) or the supervisor is gone
    for (int tries = 0; tries < 10'000 && !down(c.supervisor); ++tries) {
      caf::actor now;
      self->request(c.supervisor, 10s, lookup_atom::value, std::string("decode_rank"), int64_t{0})
        .receive([&](caf::actor& a) { now = std::move(a); }, [&](caf::error&) {});
      hear(0ms);
      if (now && now != rank) {
        rank = now;
        break;
      }
    }
  }
  for (int i = 0; i < 1000 && !(down(c.supervisor) && down(c.queue)); ++i)  // at most 10 s
    hear(10ms);
  CHECK(kills == 4);  // three restarts, then the fourth death escalates
  const std::string reason = down(c.supervisor) ? downs[c.supervisor.address()] : "timeout";
  CHECK(reason.find("crash_loop") != std::string::npos);
  CHECK(reason.find("decode_rank 0") != std::string::npos);
  CHECK(down(c.queue));  // the rest of the cluster stops with it
}
