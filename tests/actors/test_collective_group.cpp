// tests/actors/test_collective_group.cpp
// A decode group told it spans processes (no shared inboxes), whose payloads go over a collective
// transport (the NCCL path's rounds, here on the in-process loopback of loopback_collective.hpp):
// greedy and seeded outputs equal the single-rank generator with the same payload types, both
// ranks ran rounds, and every KV block comes back. When a peer dies inside a round, the
// survivor's new membership closes the channel and its requests run on.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>

#include "actor_fixture.hpp"
#include "actors/cluster.hpp"
#include "actors/decode_rank.hpp"
#include "actors/group_roster.hpp"
#include "actors/prefill_rank.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/generator.hpp"
#include "loopback_collective.hpp"
#include "model/tiny_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

struct collected {
  std::vector<int32_t> ids;
  finish_reason reason = finish_reason::none;
  std::string error;

  /// Takes a chunk of the request's stream: true when it is the last.
  bool add(const token_chunk& c) {
    ids.insert(ids.end(), c.token_ids.begin(), c.token_ids.end());
    reason = c.reason;
    error = c.error;
    return reason != finish_reason::none;
  }
};

struct split_group {
  std::shared_ptr<const model_weights> weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(5).build(testing::tiny_config(1000)));
  const rank_model_config rank_cfg{.reference = true,
                                   .num_kv_blocks = 48,
                                   .block_size = 4,
                                   .max_context = 128,
                                   .chunk_size = 4};
  topology_config topo;  // FP8 dispatch, BF16 combine, two micro-batches
  std::shared_ptr<testing::loopback_transport> transport = std::make_shared<testing::loopback_transport>();

  std::vector<request_spec> specs() const {
    return {
      {.prompt_ids = {0, 11, 300, 7, 9, 42, 5},
       .sampling = {.temperature = 0.0f, .max_tokens = 12, .ignore_eos = true}},
      {.prompt_ids = {0, 500}, .sampling = {.temperature = 0.0f, .max_tokens = 9, .ignore_eos = true}},
      {.prompt_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
       .sampling = {.temperature = 0.0f, .max_tokens = 10, .ignore_eos = true}},
      {.prompt_ids = {0, 77, 78},
       .sampling = {.temperature = 0.8f, .seed = 1234, .max_tokens = 11, .ignore_eos = true}},
    };
  }

  std::vector<generation_result> expected(const std::vector<request_spec>& specs) const {
    auto ref = make_cpu_reference_backend();
    kv_cache cache(weights->config.num_hidden_layers, 64, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *ref, cache, {.ep = ep_precision_of(topo)});
    generator gen(runner, tokenizer::load(MOE_TOKENIZER_DIR), rank_cfg.chunk_size);
    std::vector<generation_result> out;
    out.reserve(specs.size());
    for (const request_spec& s : specs)
      out.push_back(gen.run(s.prompt_ids, s.sampling));
    return out;
  }

  /// Each spec to `prefill`, request i decoding on decode[i % 2], answers to `client`.
  static void submit(caf::scoped_actor& client, const prefill_rank_actor& prefill,
                     const std::vector<decode_rank_actor>& decode, const std::vector<request_spec>& specs) {
    for (size_t i = 0; i < specs.size(); ++i)
      client->send(prefill, submit_atom::value,
                   prefill_job{i, specs[i], caf::actor_cast<caf::actor>(decode[i % 2]),
                               caf::actor_cast<caf::actor>(client)});
  }

  /// Two decode ranks over the transport, introduced as a group across processes.
  std::vector<decode_rank_actor> spawn_decode(caf::actor_system& sys) const {
    ep_group group = make_group(*weights, topo, 2);
    std::vector<decode_rank_actor> ranks;
    ranks.reserve(2);
    for (int64_t r = 0; r < 2; ++r) {
      group.rank = r;
      ranks.push_back(spawn_decode_rank(sys, weights, rank_cfg, group, {.collective = transport}));
    }
    introduce_across({caf::actor_cast<caf::actor>(ranks[0]), caf::actor_cast<caf::actor>(ranks[1])}, {1, 2},
                     {"", ""}, 0);
    return ranks;
  }
};

bool tokenizer_or_skip() {
  if (std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json"))
    return true;
  MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
  return false;
}

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "collective group: a decode group across 'processes' over rounds matches generate") {
  if (!tokenizer_or_skip())
    return;
  split_group g;
  REQUIRE(g.weights->config.n_routed_experts % 2 == 0);
  const std::vector<request_spec> specs = g.specs();
  const std::vector<generation_result> expected = g.expected(specs);
  auto prefill = spawn_prefill_rank(sys, g.weights, g.rank_cfg);
  const std::vector<decode_rank_actor> decode = g.spawn_decode(sys);
  split_group::submit(self, prefill, decode, specs);
  std::map<uint64_t, collected> got;
  size_t finished = 0;
  bool timed_out = false;
  while (finished < specs.size() && !timed_out)
    self->receive([&](start_atom, int64_t) {},
                  [&](token_atom, const token_chunk& c) { finished += got[c.request_id].add(c); },
                  caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  for (size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].error == "");
    CHECK(got[i].ids == expected[i].output_ids);
    CHECK(got[i].reason == expected[i].reason);
  }
  int64_t steps = 0;
  for (const decode_rank_actor& d : decode) {
    const rank_stats s = idle_stats(d);
    CHECK(s.num_running == 0);
    CHECK(s.num_free_blocks == s.num_blocks);
    steps = std::max(steps, s.num_steps);
  }
  CHECK(steps > 0);
  CHECK(idle_stats(decode[0]).num_steps == idle_stats(decode[1]).num_steps);  // lockstep
  // every payload between the two went in rounds: per step and MoE layer, a dispatch and a
  // combine round per micro-batch, on both ranks
  const int64_t moe_layers = g.weights->config.num_moe_layers();
  CHECK(g.transport->exchanges() == static_cast<uint64_t>(2 * steps * moe_layers * 2 * 2));
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
  for (const decode_rank_actor& d : decode)
    self->send_exit(d, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(
  testing::actor_fixture,
  "collective group: a peer dies inside a round, and the survivor goes on in its new membership") {
  if (!tokenizer_or_skip())
    return;
  split_group g;
  std::vector<request_spec> specs = g.specs();
  for (request_spec& s : specs)
    s.sampling.max_tokens = 40;
  const std::vector<generation_result> expected = g.expected(specs);
  auto prefill = spawn_prefill_rank(sys, g.weights, g.rank_cfg);
  const std::vector<decode_rank_actor> decode = g.spawn_decode(sys);
  split_group::submit(self, prefill, decode, specs);
  std::map<uint64_t, collected> got;
  size_t survivors_done = 0, tokens = 0;
  bool killed = false, timed_out = false;
  while (survivors_done < 2 && !timed_out)
    self->receive([&](start_atom, int64_t) {},
                  [&](token_atom, const token_chunk& c) {
                    const bool last = got[c.request_id].add(c);
                    survivors_done += c.request_id % 2 == 0 && last;
                    tokens += c.token_ids.size();
                    if (!killed && tokens >= 12) {  // decoding on both ranks: rank 1 dies
                      killed = true;
                      self->send_exit(decode[1], caf::exit_reason::kill);
                      // as a node's front does when it hears of the loss: the survivor alone
                      introduce_across({caf::actor_cast<caf::actor>(decode[0])}, {1}, {""},
                                       epoch_first_step(1));
                    }
                  },
                  caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  REQUIRE(killed);
  for (size_t i : {size_t{0}, size_t{2}}) {  // rank 0's requests, unchanged by the loss
    CAPTURE(i);
    CHECK(got[i].error == "");
    CHECK(got[i].ids == expected[i].output_ids);
  }
  const rank_stats s = idle_stats(decode[0]);
  CHECK(s.num_running == 0);
  CHECK(s.num_free_blocks == s.num_blocks);
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
  self->send_exit(decode[0], caf::exit_reason::user_shutdown);
}
