// tests/model/test_forward.cpp
// The forward pass against itself in forms that must agree by the math: naive vs absorbed MLA,
// incremental decode vs full recompute, chunked vs one-shot prefill, batched vs alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "kernels/model/forward.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

// max |a-b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0.0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / den;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

struct fixture {
  model_weights w = testing::tiny_model_builder(42).build(testing::tiny_config());
  std::unique_ptr<backend> ref = make_cpu_reference_backend();
  kv_cache cache{w.config.num_hidden_layers, 32, 4, w.config.kv_cache_dim()};

  // Logits of every token of `ids`, prefilled `chunk` tokens per forward call.
  std::vector<float> prefill_all(const std::vector<int32_t>& ids, attention_forms forms,
                                 int64_t chunk = 1 << 20) {
    model_runner runner(w, *ref, cache, {.attention = forms});
    sequence_kv kv;
    const std::vector<float> all = runner.prefill(ids, kv, chunk, /*all_logits=*/true);
    kv.release(cache);
    return all;
  }
};

const std::vector<int32_t> prompt = {0, 5, 17, 33, 2, 90, 64, 11, 7};

}  // namespace

TEST_CASE_FIXTURE(fixture, "naive and absorbed MLA give the same logits") {
  const auto naive = prefill_all(prompt, attention_forms::all(attention_form::naive));
  const auto absorbed = prefill_all(prompt, attention_forms::all(attention_form::absorbed));
  CHECK(rel_diff(absorbed, naive) < 1e-5);
  CHECK(rel_diff(prefill_all(prompt, {}), naive) < 1e-5);  // the default: naive, absorbed last layer
  CHECK(cache.num_free_blocks() == cache.num_blocks());
}

TEST_CASE_FIXTURE(fixture, "chunked prefill equals one-shot prefill") {
  for (const attention_forms forms : {attention_forms{}, attention_forms::all(attention_form::absorbed)}) {
    const auto whole = prefill_all(prompt, forms);
    for (int64_t chunk : {1, 2, 4, 5})
      CHECK(rel_diff(prefill_all(prompt, forms, chunk), whole) < 1e-5);
  }
}

TEST_CASE_FIXTURE(fixture, "incremental greedy decode equals full recompute") {
  const int64_t V = w.config.vocab_size;
  model_runner runner(w, *ref, cache);
  sequence_kv kv;
  std::vector<int32_t> seq = prompt;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(seq.size())));
  const batch_entry first{.tokens = seq, .kv = &kv};
  std::vector<float> logits = runner.forward(std::span(&first, 1));
  for (int step = 0; step < 6; ++step) {
    // full recompute of the whole sequence, last row
    const auto full = prefill_all(seq, {});
    const std::vector<float> full_last(full.end() - V, full.end());
    CHECK(rel_diff(logits, full_last) < 1e-4);
    const int32_t next = argmax(logits.data(), V);
    CHECK(next == argmax(full_last.data(), V));
    seq.push_back(next);
    REQUIRE(kv.reserve(cache, static_cast<int64_t>(seq.size())));
    const batch_entry e{.tokens = std::span(&seq.back(), 1), .kv = &kv, .decode = true};
    logits = runner.forward(std::span(&e, 1));
  }
  kv.release(cache);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
}

TEST_CASE_FIXTURE(fixture, "a batch of sequences equals each sequence alone") {
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8}, {40, 41, 42, 43, 44, 45, 46}};
  const int64_t V = w.config.vocab_size;
  model_runner runner(w, *ref, cache);
  std::vector<sequence_kv> kvs(prompts.size());
  std::vector<batch_entry> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(kvs[i].reserve(cache, static_cast<int64_t>(prompts[i].size())));
    batch.push_back({.tokens = prompts[i], .kv = &kvs[i]});
  }
  const auto batched = runner.forward(batch);
  REQUIRE(batched.size() == prompts.size() * V);
  for (auto& kv : kvs)
    kv.release(cache);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = prefill_all(prompts[i], {});
    const std::vector<float> last(alone.end() - V, alone.end());
    const std::vector<float> row(batched.begin() + i * V, batched.begin() + (i + 1) * V);
    CHECK(rel_diff(row, last) < 1e-5);
  }
}

TEST_CASE_FIXTURE(fixture, "activations stay O(1) through every layer and logits are finite") {
  std::vector<double> layer_rms;
  model_runner runner(w, *ref, cache, {.observe_layer = [&](int64_t, std::span<const float> h) {
                        double ss = 0.0;
                        for (float v : h)
                          ss += static_cast<double>(v) * v;
                        layer_rms.push_back(std::sqrt(ss / h.size()));
                      }});
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size())));
  const batch_entry e{.tokens = prompt, .kv = &kv, .all_logits = true};
  const auto logits = runner.forward(std::span(&e, 1));
  kv.release(cache);
  REQUIRE(layer_rms.size() == static_cast<size_t>(w.config.num_hidden_layers));
  for (double rms : layer_rms) {
    CHECK(rms > 0.3);
    CHECK(rms < 10.0);
  }
  double max_abs = 0.0;
  for (float v : logits) {
    REQUIRE(std::isfinite(v));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
  }
  CHECK(max_abs > 0.1);
  CHECK(max_abs < 100.0);
}

TEST_CASE_FIXTURE(fixture, "token ids outside the vocabulary are rejected") {
  model_runner runner(w, *ref, cache);
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, 2));
  const std::vector<int32_t> bad = {3, static_cast<int32_t>(w.config.vocab_size)};
  const batch_entry e{.tokens = bad, .kv = &kv};
  CHECK_THROWS_AS(runner.forward(std::span(&e, 1)), input_error);
  kv.release(cache);
}

TEST_CASE_FIXTURE(fixture, "the last layer runs on the logit rows only, with the full pass's logits and KV") {
  // Two prompts (logits: last row each) and a segment without logits; once as usual, once with
  // every row's logits for all three (nothing to drop). The reference backend computes each row alone, so
  // the kept rows' logits and every cached latent must match bit for bit.
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7}, {40, 41, 42, 43}};
  const int64_t V = w.config.vocab_size, L = w.config.num_hidden_layers, D = w.config.hidden_size;
  struct run {
    std::vector<float> logits, cached;
    std::vector<int64_t> rows;  // per layer: rows of h after it
  };
  auto go = [&](bool all) {
    run out;
    model_runner runner(w, *ref, cache, {.observe_layer = [&](int64_t, std::span<const float> h) {
                          out.rows.push_back(static_cast<int64_t>(h.size()) / D);
                        }});
    std::vector<sequence_kv> kvs(prompts.size());
    std::vector<batch_entry> batch;
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(kvs[i].reserve(cache, static_cast<int64_t>(prompts[i].size())));
      batch.push_back({.tokens = prompts[i], .kv = &kvs[i], .all_logits = all, .no_logits = !all && i == 2});
    }
    out.logits = runner.forward(batch);
    for (int64_t l = 0; l < L; ++l)
      for (size_t i = 0; i < prompts.size(); ++i)
        for (int64_t pos = 0; pos < static_cast<int64_t>(prompts[i].size()); ++pos) {
          const kv_layer_view view = cache.layer(l);
          const float* slot = view.slot(kvs[i].block_table.data(), pos);
          out.cached.insert(out.cached.end(), slot, slot + view.kv_dim);
        }
    for (auto& kv : kvs)
      kv.release(cache);
    return out;
  };
  const run pruned = go(false), full = go(true);
  REQUIRE(pruned.rows.size() == static_cast<size_t>(L));
  for (int64_t l = 0; l + 1 < L; ++l)
    CHECK(pruned.rows[l] == 12);   // every token up to the last layer
  CHECK(pruned.rows[L - 1] == 2);  // then the two logit rows
  CHECK(full.rows[L - 1] == 12);
  REQUIRE(pruned.logits.size() == static_cast<size_t>(2 * V));
  REQUIRE(full.logits.size() == static_cast<size_t>(12 * V));
  for (const auto& [mine, theirs] : {std::pair{0, 4}, std::pair{1, 7}})  // last rows of the prompts
    CHECK(std::equal(pruned.logits.begin() + mine * V, pruned.logits.begin() + (mine + 1) * V,
                     full.logits.begin() + theirs * V));
  CHECK(pruned.cached == full.cached);
  CHECK(cache.num_free_blocks() == cache.num_blocks());
}
