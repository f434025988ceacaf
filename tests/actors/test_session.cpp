// tests/actors/test_session.cpp
// Sessions in front of 1 prefill + 1 decode rank: streamed chunks numbered from 0 without gaps,
// text and ids equal to single-rank generate, a stop string cancels the request on the decode
// rank and its KV comes back.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "actor_fixture.hpp"
#include "actors/decode_rank.hpp"
#include "actors/prefill_rank.hpp"
#include "actors/session.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

TEST_CASE_FIXTURE(testing::actor_fixture, "sessions stream numbered chunks and stop strings cancel decoding") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  auto tok = tokenizer::load(MOE_TOKENIZER_DIR);
  auto weights = std::make_shared<const model_weights>(
      testing::tiny_model_builder(8).build(testing::tiny_config(1000)));
  const rank_model_config rank_cfg{.reference = true, .num_kv_blocks = 24, .block_size = 4,
                                   .max_context = 96, .chunk_size = 4};
  auto ref = make_cpu_reference_backend();
  kv_cache cache(weights->config.num_hidden_layers, 24, 4, weights->config.kv_cache_dim());
  model_runner runner(*weights, *ref, cache);
  generator gen(runner, tok, 4);

  const sampling_params greedy{.temperature = 0.0f, .max_tokens = 12, .ignore_eos = true};
  std::vector<request_spec> specs = {{.prompt_ids = {0, 300, 301, 302}, .sampling = greedy},
                                     {.prompt_ids = {0, 640}, .sampling = greedy}};
  const generation_result plain = gen.run(specs[0].prompt_ids, greedy);
  REQUIRE(plain.text.size() >= 4);
  // request 1 stops at a piece from the middle of its own greedy text
  const generation_result other = gen.run(specs[1].prompt_ids, greedy);
  REQUIRE(other.text.size() >= 4);
  specs[1].sampling.stop = {other.text.substr(other.text.size() / 2, 2)};
  const generation_result stopped = gen.run(specs[1].prompt_ids, specs[1].sampling);
  REQUIRE(stopped.reason == finish_reason::stop);
  const std::vector<generation_result> expected = {plain, stopped};

  auto prefill = spawn_prefill_rank(sys, weights, rank_cfg);
  auto decode = spawn_decode_rank(sys, weights, rank_cfg);
  const auto client = caf::actor_cast<caf::actor>(self);
  for (uint64_t i = 0; i < specs.size(); ++i) {
    auto s = spawn_session(sys, {.request_id = i, .spec = specs[i], .tok = tok, .client = client,
                                 .decode_rank = caf::actor_cast<caf::actor>(decode)});
    self->send(prefill, submit_atom::value,
               prefill_job{i, specs[i], caf::actor_cast<caf::actor>(decode), caf::actor_cast<caf::actor>(s)});
  }
  std::map<uint64_t, std::string> streamed;
  std::map<uint64_t, uint64_t> next_seq;
  std::map<uint64_t, session_result> results;
  bool timed_out = false;
  while (results.size() < specs.size() && !timed_out)
    self->receive(
        [&](token_atom, const stream_chunk& c) {
          CHECK(c.seq == next_seq[c.request_id]++);
          streamed[c.request_id] += c.text_delta;
        },
        [&](done_atom, const session_result& r) { results[r.request_id] = r; },
        caf::after(30s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  for (uint64_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].output_ids == expected[i].output_ids);
    CHECK(results[i].text == expected[i].text);
    CHECK(results[i].reason == expected[i].reason);
    CHECK(streamed[i] == expected[i].text);
  }
  // the cancelled request's KV is freed at the decode rank's next step boundary
  const rank_stats d = idle_stats(decode);
  CHECK(d.num_running == 0);
  CHECK(d.num_free_blocks == d.num_blocks);
  self->send_exit(prefill, caf::exit_reason::user_shutdown);
  self->send_exit(decode, caf::exit_reason::user_shutdown);
}
