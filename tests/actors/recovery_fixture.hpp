// tests/actors/recovery_fixture.hpp
// What the recovery tests share: the 2P+2D topology with small pools, greedy request specs, the
// single-rank generator to compare with, and a fixture that submits a load, collects streams and
// results (killing actors between answers when asked) and checks them.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>

#include "actor_fixture.hpp"
#include "actors/cluster.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

namespace moe::testing {

using namespace std::chrono_literals;

inline std::shared_ptr<const tokenizer> real_tokenizer() {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return nullptr;
  }
  return tokenizer::load(MOE_TOKENIZER_DIR);
}

inline topology_config recovery_topology() {
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
inline topology_config one_rank_groups() {
  topology_config topo = recovery_topology();
  topo.prefill_ranks = 1;
  topo.decode_ranks = 1;
  topo.max_running_requests = 8;
  return topo;
}

inline std::shared_ptr<const model_weights> tiny_weights() {
  return std::make_shared<const model_weights>(tiny_model_builder(9).build(tiny_config(1000)));
}

inline std::vector<request_spec> greedy_requests(int64_t count, uint32_t seed) {
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

struct recovery_case : actor_fixture {
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

  // Every rank living now (restarted ones too, 2P+2D) runs nothing and holds no block or booking.
  void check_ranks_idle(const cluster& c) {
    for (const char* kind : {"prefill_rank", "decode_rank"})
      for (int64_t r = 0; r < 2; ++r) {
        const auto rank = ask<caf::actor>(c.supervisor, lookup_atom::value, std::string(kind), r);
        REQUIRE(rank);
        const rank_stats s = idle_stats(rank);
        CHECK(s.num_running == 0);
        CHECK(s.num_free_blocks == s.num_blocks);
        if (std::string(kind) == "decode_rank")
          CHECK(ask<rank_bookings>(caf::actor_cast<decode_rank_actor>(rank), bookings_atom::value)
                  .request_ids.empty());
      }
  }

  // Submits `spec` alone (to the first queue, or to `queue`) and waits for its result (an
  // error result after 30 s).
  session_result run_one(const cluster& c, const request_spec& spec) { return run_one(c.queue, spec); }
  session_result run_one(const request_queue_actor& queue, const request_spec& spec) {
    self->request(queue, 10s, submit_atom::value, spec)
      .receive([](uint64_t) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
    session_result last;
    self->receive_while([&] {
      return last.reason == finish_reason::none;
    })([&](token_atom, const stream_chunk&) {}, [&](done_atom, const session_result& r) { last = r; },
       caf::after(30s) >> [&] { last.reason = finish_reason::error; });
    return last;
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

  // Submits every spec at once and collects streams and results; `on_answer(n)` runs after the
  // n-th final answer.
  template <class OnAnswer>
  std::map<uint64_t, collected> run_load(const cluster& c, const std::vector<request_spec>& specs,
                                         std::map<uint64_t, size_t>& index_of, OnAnswer on_answer) {
    for (size_t i = 0; i < specs.size(); ++i)
      self->request(c.queue, 10s, submit_atom::value, specs[i])
        .receive([&](uint64_t id) { index_of[id] = i; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    std::map<uint64_t, collected> got;
    size_t num_done = 0;
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
          on_answer(++num_done);
        },
        caf::after(60s) >> [&] { timed_out = true; });
    REQUIRE_FALSE(timed_out);
    return got;
  }

  // run_load that, after every `every`-th final answer, kills the next of `kinds` (index
  // `indices[i]`), `max_kills` in all.
  std::map<uint64_t, collected> run_with_kills(const cluster& c, const std::vector<request_spec>& specs,
                                               const std::vector<std::string>& kinds,
                                               const std::vector<int64_t>& indices, size_t every,
                                               size_t max_kills, std::map<uint64_t, size_t>& index_of) {
    size_t num_kills = 0;
    std::map<uint64_t, collected> got = run_load(c, specs, index_of, [&](size_t num_done) {
      if (num_done % every != 0 || num_kills == max_kills)
        return;
      const size_t k = num_kills++ % kinds.size();
      self->request(c.supervisor, 10s, kill_atom::value, kinds[k], indices[k])
        .receive([&](bool killed) { CHECK(killed); }, [&](caf::error& e) { FAIL(sys.render(e)); });
    });
    CHECK(num_kills == max_kills);
    return got;
  }
};

}  // namespace moe::testing
