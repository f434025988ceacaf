// tests/tools/test_single_rank.cpp
// bench-cluster's "1 rank" baseline: continuous batching on one runner gives every request the
// greedy tokens it gets alone, mixes prompt chunks with decode tokens under the budget, stops on
// stop token ids, times each request, and returns every KV block.
#include <doctest/doctest.h>

#include <algorithm>

#include "model/tiny_model.hpp"
#include "tools/lib/single_rank.hpp"

using namespace moe;

namespace {

struct fixture {
  model_weights w = testing::tiny_model_builder(11).build(testing::tiny_config(300));
  std::unique_ptr<backend> ref = make_cpu_reference_backend();
  kv_cache cache{w.config.num_hidden_layers, 40, 4, w.config.kv_cache_dim()};
  model_runner runner{w, *ref, cache};

  // Greedy alone, by hand: prefill, then argmax (lowest id on ties) token by token.
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int64_t n) {
    sequence_kv kv;
    REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size()) + n));
    std::vector<float> logits = runner.prefill(prompt, kv, /*chunk_size=*/64);
    std::vector<int32_t> out;
    while (static_cast<int64_t>(out.size()) < n) {
      out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      if (static_cast<int64_t>(out.size()) == n)
        break;
      const batch_entry e{.tokens = std::span(&out.back(), 1), .kv = &kv, .decode = true};
      logits = runner.forward(std::span(&e, 1));
    }
    kv.release(cache);
    return out;
  }
};

request_spec greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  return {.prompt_ids = std::move(prompt),
          .sampling = {.temperature = 0.0f, .max_tokens = max_tokens, .ignore_eos = true}};
}

}  // namespace

TEST_CASE_FIXTURE(fixture, "single rank: continuous batching gives each request its greedy tokens alone") {
  std::vector<request_spec> specs = {greedy({1, 2, 3}, 6), greedy({5, 6, 7, 8, 9, 10, 11, 12, 13}, 4),
                                     greedy({40}, 7),
                                     greedy({7, 100, 200, 250, 3, 9, 17, 60, 61, 62, 63, 64, 65}, 5),
                                     greedy({299, 298}, 3)};
  std::vector<std::vector<int32_t>> want;
  for (const request_spec& s : specs)
    want.push_back(alone(s.prompt_ids, s.sampling.max_tokens));
  // a stop token id: request 0 ends at the first occurrence of its third token
  specs[0].sampling.stop_token_ids = {want[0][2]};
  const auto stop_at = std::find(want[0].begin(), want[0].end(), want[0][2]) + 1;
  const std::vector<int32_t> want_0_stopped(want[0].begin(), stop_at);

  // budget 4: the 9- and 13-token prompts take several calls, beside other requests' decode tokens
  for (const int64_t concurrency : {1, 2, 5}) {
    CAPTURE(concurrency);
    const tools::cluster_run run = tools::run_single_rank(runner, specs,
                                                          {.concurrency = concurrency, .token_budget = 4});
    REQUIRE(run.requests.size() == specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      CAPTURE(i);
      const tools::cluster_request_result& r = run.requests[i];
      CHECK(r.result.output_ids == (i == 0 ? want_0_stopped : want[i]));
      CHECK(r.result.reason == (i == 0 ? finish_reason::stop : finish_reason::length));
      CHECK(r.num_prompt_tokens == static_cast<int64_t>(specs[i].prompt_ids.size()));
      REQUIRE(r.token_times_s.size() == r.result.output_ids.size());
      CHECK(r.ttft_s == r.token_times_s.front());
      CHECK(std::is_sorted(r.token_times_s.begin(), r.token_times_s.end()));
      CHECK(r.total_s == r.token_times_s.back());
      CHECK(r.total_s <= run.wall_s);
    }
    CHECK(cache.num_free_blocks() == cache.num_blocks());
  }
}

TEST_CASE_FIXTURE(fixture, "single rank: refuses stop strings and a KV pool too small, and keeps no block") {
  request_spec with_stop = greedy({1, 2}, 3);
  with_stop.sampling.stop = {"x"};
  CHECK_THROWS_AS((void)tools::run_single_rank(runner, {with_stop}, {}), input_error);
  // 40 blocks of 4 tokens: three requests of 60 tokens each need 45
  const std::vector<request_spec> big = {greedy(std::vector<int32_t>(50, 3), 10),
                                         greedy(std::vector<int32_t>(50, 4), 10),
                                         greedy(std::vector<int32_t>(50, 5), 10)};
  CHECK_THROWS_WITH_AS(
    (void)tools::run_single_rank(runner, big, {.concurrency = 3}),
    "single rank: the KV pool (40 blocks of 4 tokens) cannot hold request 2 (60 tokens) beside 2 running",
    input_error);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
  CHECK(tools::run_single_rank(runner, big, {.concurrency = 2}).requests[2].result.output_ids.size() == 10);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
}
