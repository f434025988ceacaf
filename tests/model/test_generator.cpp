// tests/model/test_generator.cpp
// Single-rank generation: finish reasons, stop tokens and strings (vLLM semantics), streamed
// text equal to the final text, KV blocks returned after every request, logprobs by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

struct gen_fixture {
  std::shared_ptr<const tokenizer> tok;
  model_weights w = testing::tiny_model_builder(7).build(testing::tiny_config(1000));
  std::unique_ptr<backend> ref = make_cpu_reference_backend();
  kv_cache cache{w.config.num_hidden_layers, 16, 8, w.config.kv_cache_dim()};
  model_runner runner{w, *ref, cache};

  gen_fixture() {
    if (std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json"))
      tok = tokenizer::load(MOE_TOKENIZER_DIR);
  }
  generation_result run(sampling_params p, std::string* streamed = nullptr) {
    generator gen(runner, tok, /*chunk_size=*/3);
    auto r = gen.run({0, 300, 500, 700, 20}, p, [&](std::string_view d) {
      if (streamed)
        *streamed += d;
    });
    CHECK(cache.num_free_blocks() == cache.num_blocks());
    return r;
  }
};

}  // namespace

TEST_CASE_FIXTURE(gen_fixture, "greedy generation: length, stop token ids, stop strings") {
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  sampling_params greedy{.temperature = 0.0f, .max_tokens = 12, .ignore_eos = true};
  std::string streamed;
  const generation_result base = run(greedy, &streamed);
  CHECK(base.reason == finish_reason::length);
  REQUIRE(base.output_ids.size() == 12);
  CHECK(streamed == base.text);
  CHECK(base.text == tok->decode(base.output_ids, /*skip_special=*/true));

  SUBCASE("deterministic") { CHECK(run(greedy).output_ids == base.output_ids); }

  SUBCASE("a stop token id ends generation and is kept in the ids") {
    sampling_params p = greedy;
    p.stop_token_ids = {base.output_ids[4]};
    const auto r = run(p);
    CHECK(r.reason == finish_reason::stop);
    const auto first = std::find(base.output_ids.begin(), base.output_ids.end(), base.output_ids[4]);
    CHECK(r.output_ids == std::vector<int32_t>(base.output_ids.begin(), first + 1));
  }

  SUBCASE("a stop string truncates the text before it") {
    // a piece of the greedy text that starts after its first character
    const size_t at = base.text.size() / 2;
    if (at > 0 && base.text.size() - at >= 2) {
      sampling_params p = greedy;
      const std::string stop = base.text.substr(at, 2);
      p.stop = {stop};
      std::string s;
      const auto r = run(p, &s);
      CHECK(r.reason == finish_reason::stop);
      CHECK(r.text == base.text.substr(0, base.text.find(stop)));
      CHECK(s == r.text);  // nothing past the stop was streamed
    }
  }
}

TEST_CASE_FIXTURE(gen_fixture, "a prompt that does not fit the context is rejected") {
  if (!tok)
    return;
  generator gen(runner, tok);
  const std::vector<int32_t> long_prompt(16 * 8, 5);  // the cache holds 128 tokens
  CHECK_THROWS_AS(gen.run(long_prompt, {}), input_error);
  CHECK_THROWS_AS(gen.run({}, {}), input_error);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
  // a max_context below the cache's (generate --single-rank --max-context): the prompt must
  // fit it, and the output stops at it with "length"
  generator small(runner, tok, /*chunk_size=*/512, /*max_context=*/7);
  CHECK_THROWS_AS(small.run(std::vector<int32_t>(7, 5), {}), input_error);
  const generation_result r = small.run({0, 300, 500, 700, 20}, {.max_tokens = 10, .ignore_eos = true});
  CHECK(r.output_ids.size() == 2);
  CHECK(r.reason == finish_reason::length);
}

TEST_CASE_FIXTURE(gen_fixture,
                  "logprobs: each output token's log-softmax and the top alternatives, by hand") {
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return;
  }
  sampling_params p{.temperature = 0.0f, .max_tokens = 4, .ignore_eos = true, .logprobs = 3};
  const generation_result r = run(p);
  REQUIRE(r.output_ids.size() == 4);
  REQUIRE(r.logprobs.size() == r.output_ids.size());
  // By hand, from the runner's own logits of the same tokens: log(softmax) in long double.
  std::vector<int32_t> seq = {0, 300, 500, 700, 20};
  for (size_t i = 0; i < r.output_ids.size(); ++i) {
    CAPTURE(i);
    sequence_kv kv;
    REQUIRE(kv.reserve(cache, static_cast<int64_t>(seq.size())));
    const std::vector<float> logits = runner.prefill(seq, kv, /*chunk_size=*/64);
    kv.release(cache);
    long double top = -1e300L, sum = 0.0L;
    for (float x : logits)
      top = std::max<long double>(top, x);
    for (float x : logits)
      sum += std::exp(static_cast<long double>(x) - top);
    auto logprob = [&](int32_t id) { return static_cast<double>(logits[id] - top - std::log(sum)); };
    const token_logprobs& t = r.logprobs[i];
    CHECK(t.token_id == r.output_ids[i]);
    CHECK(t.logprob == doctest::Approx(logprob(t.token_id)).epsilon(1e-5));
    REQUIRE(t.top.size() == 3);
    CHECK(t.top[0].token_id == t.token_id);  // greedy: the most likely token
    for (size_t k = 0; k < 3; ++k)
      CHECK(t.top[k].logprob == doctest::Approx(logprob(t.top[k].token_id)).epsilon(1e-5));
    CHECK(t.top[0].logprob >= t.top[1].logprob);
    CHECK(t.top[1].logprob >= t.top[2].logprob);
    seq.push_back(r.output_ids[i]);
  }
  p.logprobs.reset();
  CHECK(run(p).logprobs.empty());
}
