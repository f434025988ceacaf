// tests/actors/test_fault_points.cpp
// A rank crashed deterministically at one point of a request's path (actors/rank/fault_point.hpp),
// over 2P+2D under load (the tiny model, greedy): mid-dispatch and mid-combine of a step's last
// MoE layer (its peer waits inside the step for a payload that never comes), during a KV
// hand-off (on either side) and between a hand-off's arrival and its first decode step. The rank
// is restarted once, its group abandons the step, the requests it held are placed again, and
// every request still gives the single-rank generator's tokens with every KV block and booking
// back; a client that dies as its requests migrate leaves nothing held. A rank that hangs
// mid-step (alive, answering, no progress) is killed by the watchdog, not its waiting peer.
#include <doctest/doctest.h>

#include "recovery_fixture.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

struct fault_case {
  std::string kind;
  int64_t index;
  std::string point;
};

// A client in an actor of its own (so that it can die): submits `specs` and forwards what it
// hears to `sink`.
caf::behavior client_proxy(caf::event_based_actor* self, caf::actor queue, std::vector<request_spec> specs,
                           caf::actor sink) {
  for (request_spec& spec : specs)
    self->request(queue, 10s, submit_atom::value, std::move(spec)).then([](uint64_t) {});
  return {
    [=](attach_atom, uint64_t, const caf::actor&) {},
    [=](token_atom, const stream_chunk& chunk) { self->send(sink, token_atom::value, chunk); },
    [=](done_atom, const session_result& r) { self->send(sink, done_atom::value, r); },
  };
}

caf::actor rank_of(const cluster& c, const std::string& kind, int64_t index) {
  return kind == "prefill_rank" ? caf::actor_cast<caf::actor>(c.prefill_ranks.at(index))
                                : caf::actor_cast<caf::actor>(c.decode_ranks.at(index));
}

}  // namespace

TEST_CASE_FIXTURE(recovery_case,
                  "fault points: a rank crashed mid-dispatch, mid-combine, during a hand-off or before a "
                  "request's first decode step is restarted once and every request gives the generator's "
                  "tokens") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  fault_case fc;
  SUBCASE("prefill rank 0, mid-dispatch") { fc = {"prefill_rank", 0, "dispatch"}; }
  SUBCASE("prefill rank 1, mid-combine") { fc = {"prefill_rank", 1, "combine"}; }
  SUBCASE("decode rank 0, mid-dispatch") { fc = {"decode_rank", 0, "dispatch"}; }
  SUBCASE("decode rank 1, mid-combine") { fc = {"decode_rank", 1, "combine"}; }
  SUBCASE("prefill rank 0, the hand-off not sent") { fc = {"prefill_rank", 0, "handoff"}; }
  SUBCASE("decode rank 1, the hand-off arrived") { fc = {"decode_rank", 1, "handoff"}; }
  SUBCASE("decode rank 0, before the first decode step") { fc = {"decode_rank", 0, "first_decode"}; }
  CAPTURE(fc.kind);
  CAPTURE(fc.index);
  CAPTURE(fc.point);
  auto weights = tiny_weights();
  const topology_config topo = recovery_topology();
  const std::vector<request_spec> specs = greedy_requests(16, 73);
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  CHECK(ask<bool>(rank_of(c, fc.kind, fc.index), fault_atom::value, fc.point));

  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {}, {}, specs.size() + 1, 0, index_of);
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);
  int64_t migrated = 0;
  for (const auto& [id, g] : got)
    migrated += g.result.num_migrations;
  MESSAGE(fc.kind << " " << fc.index << " at " << fc.point << ": " << migrated << " migrations");
  CHECK(migrated > 0);  // the rank held requests when it crashed
  std::map<std::string, int64_t> restarts = restarts_by_kind(c);
  CHECK(restarts[fc.kind] == 1);
  CHECK(restarts[fc.kind == "prefill_rank" ? "decode_rank" : "prefill_rank"] == 0);
  check_ranks_idle(c);
  check_queue_empty(c);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "fault points: a client that disconnects while its requests migrate frees everything") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = recovery_topology();
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  const caf::actor crashing = rank_of(c, "decode_rank", 0);
  CHECK(ask<bool>(crashing, fault_atom::value, std::string("first_decode")));
  self->monitor(crashing);
  const caf::actor client = sys.spawn(client_proxy, caf::actor_cast<caf::actor>(c.queue),
                                      greedy_requests(16, 29), caf::actor_cast<caf::actor>(self));
  // the client dies as the sessions hear of the crash and place their requests again
  bool crashed = false;
  self->receive_while([&] { return !crashed; })(
    [&](caf::down_msg& dm) {
      crashed = dm.source == crashing.address();
      if (crashed)
        self->send_exit(client, caf::exit_reason::kill);
    },
    [](token_atom, const stream_chunk&) {}, [](done_atom, const session_result&) {},
    caf::after(30s) >> [&] { FAIL("the armed decode rank did not crash"); });
  // bounded: the sessions end (their client is gone) and give back their running slots
  queue_stats qs{.num_queued = 1, .num_running = 1};
  for (int tries = 0; tries < 1000 && (qs.num_queued > 0 || qs.num_running > 0); ++tries) {
    qs = ask<queue_stats>(c.queue, stats_atom::value);
    self->receive([](token_atom, const stream_chunk&) {}, [](done_atom, const session_result&) {},
                  caf::after(5ms) >> [] {});
  }
  CHECK(qs.num_queued == 0);
  CHECK(qs.num_running == 0);
  // each of the 16 was admitted once, and each one's session ended (its running slot is back)
  CHECK(qs.num_admitted == 16);
  check_ranks_idle(c);
  const auto balancer = caf::actor_cast<decode_balancer_actor>(
    ask<caf::actor>(c.supervisor, lookup_atom::value, std::string("decode_balancer"), int64_t{0}));
  CHECK(ask<std::vector<int64_t>>(balancer, stats_atom::value) == std::vector<int64_t>{0, 0});
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case,
                  "fault points: a rank that hangs mid-step is killed by the watchdog, and only it: its "
                  "peer waiting inside the step is spared, and every request gives the generator's tokens") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = recovery_topology();
  topo.stall_timeout_s = 2.0;  // the bound on the wait; long enough for a loaded sanitizer run
  const std::vector<request_spec> specs = greedy_requests(16, 41);
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  CHECK(ask<bool>(rank_of(c, "decode_rank", 1), fault_atom::value, std::string("hang")));

  const auto started = std::chrono::steady_clock::now();
  std::map<uint64_t, size_t> index_of;
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {}, {}, specs.size() + 1, 0, index_of);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  MESSAGE("16 requests past a hung decode rank in " << seconds << " s (stall timeout 2 s)");
  reference(weights, tok, topo);
  check_outputs(specs, index_of, got);
  std::map<std::string, int64_t> restarts;  // "kind index"
  for (const actor_info& a : ask<std::vector<actor_info>>(c.supervisor, actors_atom::value))
    restarts[a.kind + " " + std::to_string(a.index)] = a.restarts;
  CHECK(restarts["decode_rank 1"] == 1);  // the hung one, once
  CHECK(restarts["decode_rank 0"] == 0);  // its peer waited on it and was spared
  CHECK(restarts["prefill_rank 0"] == 0);
  CHECK(restarts["prefill_rank 1"] == 0);
  check_ranks_idle(c);
  check_queue_empty(c);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case, "fault points: a point a rank does not have is refused") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  scoped_cluster two = spawn_cluster(sys, weights, tok, {.topology = recovery_topology(), .reference = true});
  auto refused = [&](const caf::actor& rank, const std::string& point) {
    std::string text;
    self->request(rank, 10s, fault_atom::value, point)
      .receive([&](bool) { text = "armed"; }, [&](caf::error& e) { text = sys.render(e); });
    return text;
  };
  CHECK(refused(rank_of(two, "prefill_rank", 0), "first_decode").find("a decode rank's point") !=
        std::string::npos);
  const std::string unknown = refused(rank_of(two, "decode_rank", 0), "mid_layer");
  CHECK(unknown.find("no fault point is called") != std::string::npos);
  CHECK(unknown.find("mid_layer") != std::string::npos);
  two.stop();
  scoped_cluster one = spawn_cluster(sys, weights, tok, {.topology = one_rank_groups(), .reference = true});
  CHECK(refused(rank_of(one, "decode_rank", 0), "combine").find("alone in its group") != std::string::npos);
  CHECK(refused(rank_of(one, "decode_rank", 0), "handoff") == "armed");
  one.stop();
}
