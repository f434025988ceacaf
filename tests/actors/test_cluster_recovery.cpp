// tests/actors/test_cluster_recovery.cpp
// The cluster under load while its supervisor's restartable children are killed (2P+2D, the tiny
// model, greedy): the decode balancer (it rebuilds its bookings from the decode ranks) and the
// metrics actor, each killed several times mid-load. Every request still ends once, with the
// single-rank generator's tokens, a gapless stream, and every KV block and booking back. Over
// 1P+1D (groups of one) the ranks themselves are killed: their requests are placed again by
// their sessions (prompt + tokens so far re-prefilled) and still give the generator's tokens, up
// to max_migrations. Over 2P+2D a killed rank rejoins its group in a new epoch: its peers abandon
// the step they were in and run it again. Decode ranks that overcommit their KV (new_token_ratio < 1) preempt and
// recompute requests, again with the generator's tokens.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>

#include "actor_fixture.hpp"
#include "actors/cluster.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const tokenizer> real_tokenizer() {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return nullptr;
  }
  return tokenizer::load(MOE_TOKENIZER_DIR);
}

topology_config recovery_topology() {
  topology_config topo;
  topo.prefill_ranks = 2;
  topo.decode_ranks = 2;
  topo.kv_blocks = 64;
  topo.page_size = 4;
  topo.max_context = 96;
  topo.chunked_prefill_size = 16;
  topo.max_prefill_tokens = 32;
  topo.max_running_requests = 4;  // picks wait for bookings to end: the balancer's state matters
  return topo;
}

// 1P+1D: each rank alone in its group, so restartable.
topology_config one_rank_groups() {
  topology_config topo = recovery_topology();
  topo.prefill_ranks = 1;
  topo.decode_ranks = 1;
  topo.max_running_requests = 8;
  return topo;
}

std::shared_ptr<const model_weights> tiny_weights() {
  return std::make_shared<const model_weights>(
    testing::tiny_model_builder(9).build(testing::tiny_config(1000)));
}

std::vector<request_spec> greedy_requests(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<request_spec> specs;
  for (int64_t i = 0; i < count; ++i) {
    request_spec s;
    s.prompt_ids.push_back(0);
    const int64_t len = 2 + static_cast<int64_t>(rng() % 40);
    for (int64_t t = 1; t < len; ++t)
      s.prompt_ids.push_back(static_cast<int32_t>(rng() % 1000));
    s.sampling = {.temperature = 0.0f, .max_tokens = 2 + static_cast<int32_t>(rng() % 8), .ignore_eos = true};
    specs.push_back(std::move(s));
  }
  return specs;
}

struct collected {
  std::vector<int32_t> streamed;
  uint64_t next_seq = 0;
  bool seq_ok = true;
  int64_t num_results = 0;
  session_result result;
};

struct recovery_case : testing::actor_fixture {
  template <class T, class Handle, class... Ts>
  T ask(const Handle& h, Ts... xs) {
    T out{};
    self->request(h, 10s, xs...)
      .receive([&](T& x) { out = std::move(x); }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return out;
  }

  // Nothing waits in the queue and no running slot is held.
  void check_queue_empty(const cluster& c) {
    const queue_stats qs = ask<queue_stats>(c.queue, stats_atom::value);
    CHECK(qs.num_running == 0);
    CHECK(qs.num_queued == 0);
  }

  // The supervisor's restarts of each kind of actor.
  std::map<std::string, int64_t> restarts_by_kind(const cluster& c) {
    std::map<std::string, int64_t> restarts;
    for (const actor_info& a : ask<std::vector<actor_info>>(c.supervisor, actors_atom::value))
      restarts[a.kind] += a.restarts;
    return restarts;
  }

  // The single-rank generator with the cluster's payload types (kept for the case's checks).
  std::unique_ptr<backend> ref_backend;
  std::unique_ptr<kv_cache> ref_cache;
  std::unique_ptr<model_runner> ref_runner;
  std::unique_ptr<generator> ref_gen;
  generator& reference(const std::shared_ptr<const model_weights>& weights,
                       const std::shared_ptr<const tokenizer>& tok, const topology_config& topo) {
    ref_backend = make_cpu_reference_backend();
    ref_cache = std::make_unique<kv_cache>(weights->config.num_hidden_layers, 64, 4,
                                           weights->config.kv_cache_dim());
    ref_runner = std::make_unique<model_runner>(*weights, *ref_backend, *ref_cache,
                                                forward_options{.ep = ep_precision_of(topo)});
    ref_gen = std::make_unique<generator>(*ref_runner, tok, topo.chunked_prefill_size);
    return *ref_gen;
  }

  // Every request ended once, with a gapless stream equal to the generator's tokens.
  void check_outputs(const std::vector<request_spec>& specs, const std::map<uint64_t, size_t>& index_of,
                     std::map<uint64_t, collected>& got) {
    REQUIRE(index_of.size() == specs.size());
    for (const auto& [id, index] : index_of) {
      const size_t i = index;  // CAPTURE takes it in a lambda: clang 14 cannot capture a binding
      CAPTURE(i);
      const collected& g = got[id];
      CHECK(g.num_results == 1);
      CHECK(g.seq_ok);
      CHECK(g.result.error == "");
      const generation_result want = ref_gen->run(specs[i].prompt_ids, specs[i].sampling);
      CHECK(g.result.output_ids == want.output_ids);
      CHECK(g.streamed == want.output_ids);
    }
  }

  // Submits every spec at once and collects streams and results; after every `every`-th final
  // answer kills the next of `kinds` (index `indices[i]`), `max_kills` in all.
  std::map<uint64_t, collected> run_with_kills(const cluster& c, const std::vector<request_spec>& specs,
                                               const std::vector<std::string>& kinds,
                                               const std::vector<int64_t>& indices, size_t every,
                                               size_t max_kills, std::map<uint64_t, size_t>& index_of) {
    for (size_t i = 0; i < specs.size(); ++i)
      self->request(c.queue, 10s, submit_atom::value, specs[i])
        .receive([&](uint64_t id) { index_of[id] = i; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    std::map<uint64_t, collected> got;
    size_t num_done = 0, num_kills = 0;
    bool timed_out = false;
    while (num_done < specs.size() && !timed_out)
      self->receive(
        [&](token_atom, const stream_chunk& chunk) {
          collected& g = got[chunk.request_id];
          g.seq_ok = g.seq_ok && chunk.seq == g.next_seq++;
          g.streamed.insert(g.streamed.end(), chunk.token_ids.begin(), chunk.token_ids.end());
        },
        [&](done_atom, const session_result& r) {
          collected& g = got[r.request_id];
          g.result = r;
          ++g.num_results;
          if (++num_done % every == 0 && num_kills < max_kills) {
            const size_t k = num_kills++ % kinds.size();
            self->request(c.supervisor, 10s, kill_atom::value, kinds[k], indices[k])
              .receive([&](bool killed) { CHECK(killed); }, [&](caf::error& e) { FAIL(sys.render(e)); });
          }
        },
        caf::after(60s) >> [&] { timed_out = true; });
    REQUIRE_FALSE(timed_out);
    CHECK(num_kills == max_kills);
    return got;
  }
};

}  // namespace

TEST_CASE_FIXTURE(recovery_case,
                  "recovery: killing the decode balancer and the metrics actor under load loses nothing") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(9).build(testing::tiny_config(1000)));
  const topology_config topo = recovery_topology();
  const std::vector<request_spec> specs = greedy_requests(48, 17);
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});

  std::map<uint64_t, size_t> index_of;
  // a kill after every 6th final answer, alternating the two kinds: 4 of each
  std::map<uint64_t, collected> got = run_with_kills(c, specs, {"decode_balancer", "metrics"}, {0, 0}, 6, 8,
                                                     index_of);
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
  CHECK(restarts["metrics"] == 4);
  CHECK(restarts["prefill_rank"] == 0);
  // the new balancer books again: one more request after the load
  self->request(c.queue, 10s, submit_atom::value, specs[0])
    .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  session_result last;
  self->receive_while([&] {
    return last.reason == finish_reason::none;
  })([&](token_atom, const stream_chunk&) {}, [&](done_atom, const session_result& r) { last = r; },
     caf::after(30s) >> [&] { last.reason = finish_reason::error; });
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
  const topology_config topo = recovery_topology();
  const std::vector<request_spec> specs = greedy_requests(48, 41);
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
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
  for (const char* kind : {"prefill_rank", "decode_rank"})
    for (int64_t r = 0; r < 2; ++r) {
      const auto rank = ask<caf::actor>(c.supervisor, lookup_atom::value, std::string(kind), r);
      REQUIRE(rank);
      const rank_stats s = idle_stats(rank);
      CHECK(s.num_running == 0);
      CHECK(s.num_free_blocks == s.num_blocks);
    }
  check_queue_empty(c);
  std::map<std::string, int64_t> restarts = restarts_by_kind(c);
  CHECK(restarts["decode_rank"] == 2);
  CHECK(restarts["prefill_rank"] == 2);
  // the groups still step together: one more request after the load
  self->request(c.queue, 10s, submit_atom::value, specs[0])
    .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  session_result last;
  self->receive_while([&] {
    return last.reason == finish_reason::none;
  })([&](token_atom, const stream_chunk&) {}, [&](done_atom, const session_result& r) { last = r; },
     caf::after(30s) >> [&] { last.reason = finish_reason::error; });
  CHECK(last.output_ids == ref_gen->run(specs[0].prompt_ids, specs[0].sampling).output_ids);
  c.stop();
}

TEST_CASE_FIXTURE(recovery_case, "recovery: killing the ranks of 1P+1D under load re-places their requests") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const topology_config topo = one_rank_groups();
  const std::vector<request_spec> specs = greedy_requests(40, 23);
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  std::map<uint64_t, size_t> index_of;
  // a kill after every 6th final answer: decode rank, prefill rank, decode balancer, in turn (a
  // request runs for about 8 answers, so at most 2 of the 4 rank deaths reach it)
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
  const topology_config topo = one_rank_groups();
  std::vector<request_spec> specs = greedy_requests(30, 29);
  for (size_t i = 0; i < specs.size(); ++i) {  // sampled, with penalties on the tokens so far
    specs[i].sampling.temperature = 0.9f;
    specs[i].sampling.seed = 1000 + i;
    specs[i].sampling.frequency_penalty = 0.5f;
    specs[i].sampling.max_tokens = 8;
  }
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
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
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
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
  cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
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
