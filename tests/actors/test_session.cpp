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

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "sessions stream numbered chunks and stop strings cancel decoding") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  auto tok = tokenizer::load(MOE_TOKENIZER_DIR);
  auto weights =
    std::make_shared<const model_weights>(testing::tiny_model_builder(8).build(testing::tiny_config(1000)));
  const rank_model_config rank_cfg{
    .reference = true, .num_kv_blocks = 24, .block_size = 4, .max_context = 96, .chunk_size = 4};
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
    auto s = spawn_session(sys, {.request_id = i,
                                 .spec = specs[i],
                                 .tok = tok,
                                 .client = client,
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

namespace {

// What a session sends its client until its final answer: the streamed text and the result.
struct session_output {
  std::string streamed;
  session_result result;
};

session_output run_session(testing::actor_fixture& f, std::shared_ptr<const tokenizer> tok,
                           std::vector<std::string> stop, const std::vector<token_chunk>& chunks,
                           bool cancel) {
  request_spec spec{.prompt_ids = {0}, .sampling = {.stop = std::move(stop)}};
  auto s = spawn_session(
    f.sys,
    {.request_id = 7, .spec = spec, .tok = std::move(tok), .client = caf::actor_cast<caf::actor>(f.self)});
  for (const token_chunk& c : chunks)
    f.self->send(s, token_atom::value, c);
  if (cancel)
    f.self->send(s, cancel_atom::value);
  session_output out;
  bool done = false, timed_out = false;
  uint64_t next_seq = 0;
  while (!done && !timed_out)
    f.self->receive(
      [&](token_atom, const stream_chunk& c) {
        CHECK(c.seq == next_seq++);
        out.streamed += c.text_delta;
      },
      [&](done_atom, const session_result& r) {
        out.result = r;
        done = true;
      },
      caf::after(10s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  return out;
}

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "a cancel streams the text held back for stop strings, a stop string "
                  "completed at the end makes the end a stop") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  auto tok = tokenizer::load(MOE_TOKENIZER_DIR);
  const std::vector<int32_t> hello = tok->encode("Hello world");
  REQUIRE(tok->decode(hello) == "Hello world");

  // a 6-byte stop string holds back the last 5 bytes; cancelled, they come as a last chunk
  const session_output cancelled = run_session(*this, tok, {"QQQQQQ"},
                                               {{.request_id = 7, .token_ids = hello}}, /*cancel=*/true);
  CHECK(cancelled.result.reason == finish_reason::abort);
  CHECK(cancelled.result.output_ids == hello);
  CHECK(cancelled.result.text == "Hello world");
  CHECK(cancelled.streamed == "Hello world");

  // "Hello world" then the lone byte 0xE4 (the byte-level token "ä"): an unfinished character,
  // U+FFFD at the end, where the stop string U+FFFD cuts it off: a stop, not a length end
  const std::optional<int32_t> lead_byte = tok->token_id("\xC3\xA4");
  REQUIRE(lead_byte.has_value());
  std::vector<int32_t> ids = hello;
  ids.push_back(*lead_byte);
  const session_output cut = run_session(
    *this, tok, {"\xEF\xBF\xBD"}, {{.request_id = 7, .token_ids = ids, .reason = finish_reason::length}},
    /*cancel=*/false);
  CHECK(cut.result.reason == finish_reason::stop);
  CHECK(cut.result.text == "Hello world");
  CHECK(cut.streamed == "Hello world");
  // without the stop string the same end is a length end with the U+FFFD in the text
  const session_output kept = run_session(
    *this, tok, {}, {{.request_id = 7, .token_ids = ids, .reason = finish_reason::length}}, false);
  CHECK(kept.result.reason == finish_reason::length);
  CHECK(kept.result.text == "Hello world\xEF\xBF\xBD");
  CHECK(kept.streamed == kept.result.text);
}
