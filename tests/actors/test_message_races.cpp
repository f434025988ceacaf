// tests/actors/test_message_races.cpp
// Message-order races, made to happen in one named order on CAF's deterministic scheduler
// (deterministic_fixture.hpp), 1 prefill + 1 decode rank with synchronous streams:
// - a cancel while the decode balancer is still picking the request's rank;
// - a cancel that reaches the decode rank before the request's KV hand-off does;
// - a cancel while the request's decode step is in flight;
// - the prefill balancer's death before its pick is answered, and the request ending then;
// - the same, with the decode balancer dead too when the request ends.
// Each cancel: exactly one final answer (abort), the stream numbered from 0 with the final ids
// equal to it. Each time: every KV block and running slot back; then the same request, run
// again, gives the single-rank generator's tokens (nothing left behind that changes the next one).
#include <doctest/doctest.h>

#include <filesystem>

#include "actors/cluster.hpp"
#include "deterministic_fixture.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

struct race_case : testing::deterministic_fixture {
  std::shared_ptr<const tokenizer> tok;
  std::shared_ptr<const model_weights> weights;
  topology_config topo;
  cluster c;
  request_spec spec;

  race_case() = default;
  race_case(const race_case&) = delete;
  race_case& operator=(const race_case&) = delete;
  ~race_case() {
    if (c.root) {  // nothing runs by itself here: the actor system would wait for the cluster forever
      c.stop();
      run_all();
    }
  }

  // false (with a skip message) when set-up has not installed the tokenizer
  bool start() {
    if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
      MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
      return false;
    }
    tok = tokenizer::load(MOE_TOKENIZER_DIR);
    weights =
      std::make_shared<const model_weights>(testing::tiny_model_builder(9).build(testing::tiny_config(1000)));
    topo.prefill_ranks = 1;
    topo.decode_ranks = 1;
    topo.kv_blocks = 32;
    topo.page_size = 4;
    topo.max_context = 64;
    topo.max_running_requests = 1;  // a leaked running slot would hold the next request back
    topo.stall_timeout_s = 0;       // no watchdog: the test runs one message at a time
    c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true, .synchronous_streams = true});
    spec.prompt_ids = {0, 300, 301, 302, 303, 304};
    spec.sampling = {.temperature = 0.0f, .max_tokens = 6, .ignore_eos = true};
    run_all();  // introductions
    return true;
  }

  std::vector<caf::resumable*> held(caf::resumable* a) const { return {a}; }

  // Submits `spec` and runs until `ready()`; returns the request's id.
  template <class Pred>
  uint64_t submit_until(Pred ready) {
    auto reply = self->request(c.queue, caf::infinite, submit_atom::value, spec);
    REQUIRE(run_until(ready));
    uint64_t id = 0;
    reply.receive([&](uint64_t x) { id = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return id;
  }

  void cancel(uint64_t id) { caf::anon_send(c.queue, cancel_atom::value, id); }

  // Submits a request and kills the prefill balancer while the decode balancer is picking its
  // rank; the pick is then booked on the decode rank for no one. Returns the request's id once
  // the queue has told the client (as it tells a bridge) that what held the request is gone.
  uint64_t booked_for_a_dead_placer() {
    caf::resumable* balancer = job_of(c.decode_balancer);
    const uint64_t id = submit_until([&] { return next_message_is<pick_atom>(c.decode_balancer); });
    caf::anon_send_exit(c.prefill_balancer, caf::exit_reason::kill);
    run_all_but(held(balancer));  // it dies, and its successor is introduced
    run_all();                    // the pick is booked on the decode rank, for no one
    bool told = false;
    self->receive([&](migrate_atom, uint64_t lost) { told = lost == id; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    CHECK(told);
    return id;
  }

  // The current handle of the supervised child `kind` (restarted or not).
  template <class Handle>
  Handle current(const std::string& kind) {
    return caf::actor_cast<Handle>(ask<caf::actor>(c.supervisor, lookup_atom::value, kind, int64_t{0}));
  }

  // One abort, a gapless stream equal to the final ids; nothing else arrives later.
  void check_aborted_once(const client_view& v, uint64_t id) {
    REQUIRE(v.results.size() == 1);
    CHECK(v.results[0].request_id == id);
    CHECK(v.results[0].reason == finish_reason::abort);
    std::vector<int32_t> streamed;
    for (size_t i = 0; i < v.chunks.size(); ++i) {
      CHECK(v.chunks[i].request_id == id);
      CHECK(v.chunks[i].seq == i);
      streamed.insert(streamed.end(), v.chunks[i].token_ids.begin(), v.chunks[i].token_ids.end());
    }
    CHECK(v.results[0].output_ids == streamed);
    CHECK(v.results[0].output_ids.size() < static_cast<size_t>(spec.sampling.max_tokens));
  }

  // Every block and slot is back, and the request runs again as the single-rank generator does.
  void check_nothing_left() {
    const auto rs = ask<rank_stats>(c.decode_ranks[0], stats_atom::value);
    CHECK(rs.num_running == 0);
    CHECK(rs.num_free_blocks == rs.num_blocks);
    const auto ps = ask<rank_stats>(c.prefill_ranks[0], stats_atom::value);
    CHECK(ps.num_running == 0);
    CHECK(ps.num_free_blocks == ps.num_blocks);
    const auto qs = ask<queue_stats>(c.queue, stats_atom::value);
    CHECK(qs.num_running == 0);
    CHECK(qs.num_queued == 0);
    CHECK(ask<std::vector<int64_t>>(c.decode_balancer, stats_atom::value) == std::vector<int64_t>{0});
    CHECK(ask<std::vector<int64_t>>(c.prefill_balancer, stats_atom::value) == std::vector<int64_t>{0});

    auto ref = make_cpu_reference_backend();
    kv_cache cache(weights->config.num_hidden_layers, 32, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *ref, cache, {.ep = ep_precision_of(topo)});
    generator gen(runner, tok, topo.chunked_prefill_size);
    const generation_result want = gen.run(spec.prompt_ids, spec.sampling);
    auto reply = self->request(c.queue, caf::infinite, submit_atom::value, spec);
    run_all();
    uint64_t again = 0;
    reply.receive([&](uint64_t x) { again = x; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    const client_view v = drain_client();
    REQUIRE(v.results.size() == 1);
    CHECK(v.results[0].request_id == again);
    CHECK(v.results[0].reason == finish_reason::length);
    CHECK(v.results[0].output_ids == want.output_ids);
  }
};

}  // namespace

TEST_CASE_FIXTURE(race_case, "races: a cancel while the decode balancer picks the rank") {
  if (!start())
    return;
  caf::resumable* balancer = job_of(c.decode_balancer);
  const uint64_t id = submit_until([&] { return next_message_is<pick_atom>(c.decode_balancer); });
  cancel(id);
  run_all_but(held(balancer));
  client_view v = drain_client();
  check_aborted_once(v, id);  // answered before the pick
  CHECK(v.chunks.empty());
  run_all();  // the pick comes back for a request already answered: its booking is returned
  CHECK(drain_client().results.empty());
  check_nothing_left();
}

TEST_CASE_FIXTURE(race_case, "races: a cancel reaches the decode rank before the KV hand-off") {
  if (!start())
    return;
  caf::resumable* prefill = job_of(c.prefill_ranks[0]);
  // the prefill step ran; its completion waits in the prefill rank's mailbox
  const uint64_t id = submit_until([&] { return next_message_is<stage_atom>(c.prefill_ranks[0]); });
  cancel(id);
  run_all_but(held(prefill));  // session, decode rank: cancelled before anything arrived
  const client_view v = drain_client();
  check_aborted_once(v, id);
  CHECK(v.chunks.empty());
  CHECK(ask<rank_stats>(c.decode_ranks[0], stats_atom::value).num_steps == 0);
  run_all();  // now the hand-off arrives at the decode rank, for a request that has ended
  CHECK(drain_client().results.empty());
  CHECK(ask<rank_stats>(c.decode_ranks[0], stats_atom::value).num_steps == 0);  // never decoded
  check_nothing_left();
}

TEST_CASE_FIXTURE(race_case, "races: a cancel while the request's decode step is in flight") {
  if (!start())
    return;
  caf::resumable* decode = job_of(c.decode_ranks[0]);
  // the hand-off arrived and the first decode step ran; its completion waits in the mailbox
  const uint64_t id = submit_until([&] { return next_message_is<stage_atom>(c.decode_ranks[0]); });
  cancel(id);
  run_all_but(held(decode));
  const client_view v = drain_client();
  check_aborted_once(v, id);
  CHECK(v.results[0].output_ids.size() == 1);  // the first token, from prefill
  run_all();                                   // the step's tokens come back for a request that has ended
  CHECK(drain_client().results.empty());
  check_nothing_left();
}

TEST_CASE_FIXTURE(race_case,
                  "races: the prefill balancer dies before its pick is answered, then the request ends") {
  if (!start())
    return;
  const uint64_t id = booked_for_a_dead_placer();
  // the client is gone too, so the request ends where it is, freeing its running slot
  caf::anon_send(c.queue, done_atom::value, id);
  run_all();
  CHECK(drain_client().results.empty());
  c.prefill_balancer = current<prefill_balancer_actor>("prefill_balancer");
  check_nothing_left();  // the booking went back: the next request gets the one running slot
}

TEST_CASE_FIXTURE(
  race_case,
  "races: both balancers die around a pick, and the request ends while the decode balancer is down") {
  if (!start())
    return;
  const uint64_t id = booked_for_a_dead_placer();
  // the decode balancer dies too, and the request ends (its client gone) while it is down: the
  // end it is told dies with it; its successor takes the rank's booking back, and hears the
  // end again from the prefill balancer once introduced
  caf::anon_send_exit(c.decode_balancer, caf::exit_reason::kill);
  caf::anon_send(c.queue, done_atom::value, id);
  run_all();
  CHECK(drain_client().results.empty());
  c.prefill_balancer = current<prefill_balancer_actor>("prefill_balancer");
  c.decode_balancer = current<decode_balancer_actor>("decode_balancer");
  check_nothing_left();
}
