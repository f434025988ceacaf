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
#include "kernels/backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
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
    self->receive([&](start_atom, int64_t) { ++num_started; },
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
    self->receive([&](start_atom, int64_t) {},
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

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "a prefill rank re-prefills generated tokens in the decode form (fast path)") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  if (!cpu_fast_path_supported()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs");
    return;
  }
  model_weights w = testing::tiny_model_builder(21).build(testing::tiny_config(1024));
  fast::prepare_fast_weights(w);
  auto weights = std::make_shared<const model_weights>(std::move(w));
  // the single-rank run: prefill, then decode steps (their logprobs are the decode form's)
  auto fast_backend = make_cpu_backend(/*reference=*/false, 1);
  kv_cache cache(weights->config.num_hidden_layers, 32, 4, weights->config.kv_cache_dim());
  model_runner runner(*weights, *fast_backend, cache);
  generator gen(runner, tokenizer::load(MOE_TOKENIZER_DIR), /*chunk_size=*/512);
  const std::vector<int32_t> prompt = {1, 900, 17, 513, 64, 1023, 2, 300};
  const sampling_params greedy{.temperature = 0.0f, .max_tokens = 8, .ignore_eos = true, .logprobs = 20};
  const generation_result want = gen.run(prompt, greedy);
  REQUIRE(want.logprobs.size() == 8);

  const rank_model_config rank_cfg{
    .reference = false, .num_threads = 1, .num_kv_blocks = 32, .block_size = 4, .max_context = 128};
  auto prefill = spawn_prefill_rank(sys, weights, rank_cfg);
  // placed again after k generated tokens: its first token is the k-th of the run
  auto first_token = [&](size_t k, bool as_generated) {
    request_spec spec = continued({.prompt_ids = prompt, .sampling = greedy},
                                  std::vector<int32_t>(want.output_ids.begin(), want.output_ids.begin() + k));
    if (!as_generated)
      spec.num_generated = 0;  // all of it as a prompt
    self->send(prefill, submit_atom::value, prefill_job{k, spec, {}, caf::actor_cast<caf::actor>(self)});
    token_logprobs got;
    bool done = false;
    while (!done)
      self->receive([](start_atom, int64_t) {},
                    [&](token_atom, const token_chunk& c) {
                      REQUIRE(c.logprobs.size() == 1);
                      got = c.logprobs[0];
                      done = true;
                    },
                    caf::after(30s) >> [&] { FAIL("no first token"); });
    return got;
  };
  // the logprobs of the token and of the 20 most likely: bit for bit, or not
  auto same = [](const token_logprobs& a, const token_logprobs& b) {
    bool eq = a.token_id == b.token_id && a.logprob == b.logprob && a.top.size() == b.top.size();
    for (size_t i = 0; eq && i < a.top.size(); ++i)
      eq = a.top[i].token_id == b.top[i].token_id && a.top[i].logprob == b.top[i].logprob;
    return eq;
  };
  for (const size_t k : {size_t{1}, size_t{4}, size_t{7}}) {
    CAPTURE(k);
    const token_logprobs got = first_token(k, true);
    CHECK(got.token_id == want.output_ids[k]);
    CHECK(same(got, want.logprobs[k]));  // the decode step's row
  }
  // as a plain prompt the same tokens give other bits (why the form matters)
  CHECK_FALSE(same(first_token(4, false), want.logprobs[4]));
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
}
