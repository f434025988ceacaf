// tests/model/test_generator.cpp
// Single-rank generation: finish reasons, stop tokens and strings (vLLM semantics), streamed
// text equal to the final text, KV blocks returned after every request.
#include <doctest/doctest.h>

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
      CHECK(s == r.text);                                     // nothing past the stop was streamed
    }
  }
}

TEST_CASE_FIXTURE(gen_fixture, "a prompt that does not fit the context is rejected") {
  if (!tok)
    return;
  generator gen(runner, tok);
  const std::vector<int32_t> long_prompt(16 * 8, 5);         // the cache holds 128 tokens
  CHECK_THROWS_AS(gen.run(long_prompt, {}), input_error);
  CHECK_THROWS_AS(gen.run({}, {}), input_error);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
}
