// tests/actors/test_pd_ranks.cpp
// Prefill/decode disaggregation in-process: a prefill rank hands each request's latent KV to a
// decode rank, which batches the running requests; greedy outputs equal single-rank generate,
// each request's start is reported once before its first token, logprobs come with every token
// of the request that asked (and no other), and both KV pools return to full; a hand-off that
// arrives after its request was cancelled is dropped.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "actor_fixture.hpp"
#include "actors/decode_rank.hpp"
#include "actors/prefill_rank.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

struct collected {
  std::vector<int32_t> ids;
  std::vector<token_logprobs> logprobs;
  finish_reason reason = finish_reason::none;
  std::string error;
};

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture, "1 prefill + 1 decode rank match single-rank generate") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  auto weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(5).build(testing::tiny_config(1000)));
  const rank_model_config rank_cfg{
    .reference = true, .num_kv_blocks = 32, .block_size = 4, .max_context = 128, .chunk_size = 3};
  // the single-rank baseline
  auto ref = make_cpu_reference_backend();
  kv_cache cache(weights->config.num_hidden_layers, 32, 4, weights->config.kv_cache_dim());
  model_runner runner(*weights, *ref, cache);
  generator gen(runner, tokenizer::load(MOE_TOKENIZER_DIR), /*chunk_size=*/3);

  std::vector<request_spec> specs = {
    {.prompt_ids = {0, 11, 300, 7, 9, 42, 5},
     .sampling = {.temperature = 0.0f, .max_tokens = 9, .ignore_eos = true}},
    {.prompt_ids = {0, 500},
     .sampling = {.temperature = 0.0f, .max_tokens = 6, .ignore_eos = true, .logprobs = 3}},
    {.prompt_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, .sampling = {.temperature = 0.0f, .max_tokens = 1}},
    {.prompt_ids = {0, 77, 78},
     .sampling = {.temperature = 0.8f, .seed = 1234, .max_tokens = 7, .ignore_eos = true}},
  };
  std::vector<generation_result> expected;
  for (const auto& s : specs)
    expected.push_back(gen.run(s.prompt_ids, s.sampling));

  auto prefill = spawn_prefill_rank(sys, weights, rank_cfg);
  auto decode = spawn_decode_rank(sys, weights, rank_cfg);
  for (size_t i = 0; i < specs.size(); ++i)
    self->send(prefill, submit_atom::value,
               prefill_job{i, specs[i], caf::actor_cast<caf::actor>(decode),
                           caf::actor_cast<caf::actor>(self)});

  std::map<uint64_t, collected> got;
  size_t num_finished = 0, num_started = 0, num_first_tokens = 0;
  bool timed_out = false;
  while (num_finished < specs.size() && !timed_out)
    self->receive([&](start_atom, std::chrono::steady_clock::time_point) { ++num_started; },
                  [&](token_atom, const token_chunk& c) {
                    auto& g = got[c.request_id];
                    CHECK(g.reason == finish_reason::none);  // nothing after the last chunk
                    if (g.ids.empty() && !c.token_ids.empty())
                      CHECK(num_started > num_first_tokens++);  // its start came before
                    g.ids.insert(g.ids.end(), c.token_ids.begin(), c.token_ids.end());
                    g.logprobs.insert(g.logprobs.end(), c.logprobs.begin(), c.logprobs.end());
                    g.reason = c.reason;
                    g.error = c.error;
                    num_finished += c.reason != finish_reason::none;
                  },
                  caf::after(30s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  CHECK(num_started == specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].error == "");
    CHECK(got[i].ids == expected[i].output_ids);
    CHECK(got[i].reason == expected[i].reason);
    if (!specs[i].sampling.logprobs) {
      CHECK(got[i].logprobs.empty());
      continue;
    }
    REQUIRE(got[i].logprobs.size() == got[i].ids.size());
    for (size_t k = 0; k < got[i].ids.size(); ++k) {  // greedy: the sampled token tops the list
      CHECK(got[i].logprobs[k].token_id == got[i].ids[k]);
      REQUIRE(got[i].logprobs[k].top.size() == 3);
      CHECK(got[i].logprobs[k].top[0].token_id == got[i].ids[k]);
      CHECK(got[i].logprobs[k].logprob == got[i].logprobs[k].top[0].logprob);
    }
  }

  // every KV block back in both pools
  const rank_stats d = idle_stats(decode), p = idle_stats(prefill);
  CHECK(d.num_running == 0);
  CHECK(d.num_free_blocks == d.num_blocks);
  CHECK(d.num_steps > 0);
  CHECK(p.num_running == 0);
  CHECK(p.num_free_blocks == p.num_blocks);
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
  self->send_exit(decode, caf::exit_reason::user_shutdown);
}

// The client goes away while the prefill rank still holds the request: the session cancels at
// both ranks, and the decode rank may hear the cancel before the prefill rank's hand-off (two
// senders, no order between them). It must drop the hand-off when it comes, not run the request
// to max_tokens for a session that no longer exists.
TEST_CASE_FIXTURE(testing::actor_fixture,
                  "a hand-off that arrives after its request was cancelled is dropped") {
  auto weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(5).build(testing::tiny_config(1000)));
  const rank_model_config rank_cfg{
    .reference = true, .num_kv_blocks = 32, .block_size = 4, .max_context = 128, .chunk_size = 8};
  auto prefill = spawn_prefill_rank(sys, weights, rank_cfg);
  auto decode = spawn_decode_rank(sys, weights, rank_cfg);
  const uint64_t cancelled = 7, fence = 8;
  self->send(decode, cancel_atom::value, cancelled);  // as the session does, then it ends
  self->send(decode, done_atom::value, cancelled);
  (void)idle_stats(decode);  // both handled (one sender: in order)
  // The prefill rank plans in arrival order, so the fence's hand-off follows the cancelled one's.
  const sampling_params greedy{.temperature = 0.0f, .max_tokens = 20, .ignore_eos = true};
  self->send(prefill, submit_atom::value,
             prefill_job{cancelled,
                         {.prompt_ids = {0, 11, 300}, .sampling = greedy},
                         caf::actor_cast<caf::actor>(decode),
                         caf::actor_cast<caf::actor>(self)});
  sampling_params short_run = greedy;
  short_run.max_tokens = 5;
  self->send(prefill, submit_atom::value,
             prefill_job{fence,
                         {.prompt_ids = {0, 500}, .sampling = short_run},
                         caf::actor_cast<caf::actor>(decode),
                         caf::actor_cast<caf::actor>(self)});
  std::map<uint64_t, collected> got;
  bool timed_out = false;
  while (got[fence].reason == finish_reason::none && !timed_out)
    self->receive([&](start_atom, std::chrono::steady_clock::time_point) {},
                  [&](token_atom, const token_chunk& c) {
                    auto& g = got[c.request_id];
                    g.ids.insert(g.ids.end(), c.token_ids.begin(), c.token_ids.end());
                    g.reason = c.reason;
                  },
                  caf::after(30s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  CHECK(got[fence].ids.size() == 5);
  CHECK(got[cancelled].ids.size() == 1);  // the prefill rank's first token only
  const rank_stats d = idle_stats(decode);
  CHECK(d.num_running == 0);
  CHECK(d.num_free_blocks == d.num_blocks);
  CHECK(d.num_steps == 4);  // the fence's 4 decode steps alone
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
  self->send_exit(decode, caf::exit_reason::user_shutdown);
}
