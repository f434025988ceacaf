// tests/model/test_reprefill.cpp
// A request placed again after a lost rank is re-prefilled with its prompt and the tokens it
// generated. Run in the decode form (batch_entry::decode, what request_spec::num_generated asks
// a prefill rank for), those tokens give the decode steps' logits bit for bit, on the reference
// and on the fast path, so the greedy continuation is the same; in the prefill form the fast path's
// logits differ (its naive and absorbed attention round differently).
#include <doctest/doctest.h>

#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/forward.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

struct decoded {
  std::vector<int32_t> tokens;             // greedy outputs
  std::vector<std::vector<float>> logits;  // the logits each was picked from
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// Prefill then `n` greedy decode steps.
decoded decode_steps(const model_weights& w, backend& b, const std::vector<int32_t>& prompt, int n) {
  kv_cache cache(w.config.num_hidden_layers, 16, 4, w.config.kv_cache_dim());
  model_runner runner(w, b, cache, {});
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size()) + n));
  const batch_entry p{.tokens = prompt, .kv = &kv};
  decoded out;
  out.logits.push_back(runner.forward(std::span(&p, 1)));
  for (int i = 0; i < n; ++i) {
    out.tokens.push_back(argmax(out.logits.back()));
    const batch_entry d{.tokens = std::span(&out.tokens.back(), 1), .kv = &kv, .decode = true};
    out.logits.push_back(runner.forward(std::span(&d, 1)));
  }
  kv.release(cache);
  return out;
}

/// The last logits of prompt + generated, prefilled in one step; the generated tokens in the
/// decode form when `decode_form`.
std::vector<float> reprefill(const model_weights& w, backend& b, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>& generated, bool decode_form) {
  kv_cache cache(w.config.num_hidden_layers, 16, 4, w.config.kv_cache_dim());
  model_runner runner(w, b, cache, {});
  sequence_kv kv;
  REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size() + generated.size())));
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  std::vector<float> logits;
  if (decode_form) {
    const batch_entry entries[] = {
      {.tokens = prompt, .kv = &kv, .no_logits = true, .start = 0},
      {.tokens = generated, .kv = &kv, .start = static_cast<int64_t>(prompt.size()), .decode = true}};
    logits = runner.forward(entries);
  } else {
    const batch_entry e{.tokens = all, .kv = &kv};
    logits = runner.forward(std::span(&e, 1));
  }
  kv.release(cache);
  return logits;
}

void check_reprefill_equals_decode(const model_weights& w, backend& b) {
  const std::vector<int32_t> prompt = {1, 900, 17, 513, 64, 1023, 2, 300};
  const decoded d = decode_steps(w, b, prompt, 12);
  for (const size_t k : {size_t{1}, size_t{5}, size_t{11}}) {  // re-placed after k generated tokens
    CAPTURE(k);
    const std::vector<int32_t> generated(d.tokens.begin(), d.tokens.begin() + static_cast<std::ptrdiff_t>(k));
    CHECK(reprefill(w, b, prompt, generated, /*decode_form=*/true) == d.logits[k]);
  }
}

}  // namespace

TEST_CASE("re-prefilled generated tokens in the decode form give the decode steps' logits (reference)") {
  const model_weights w = testing::tiny_model_builder(21).build(testing::tiny_config(1024));
  const std::unique_ptr<backend> ref = make_cpu_reference_backend();
  check_reprefill_equals_decode(w, *ref);
}

TEST_CASE("re-prefilled generated tokens in the decode form give the decode steps' logits (fast path)") {
  if (!cpu_fast_path_supported()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs");
    return;
  }
  model_weights w = testing::tiny_model_builder(21).build(testing::tiny_config(1024));
  fast::prepare_fast_weights(w);
  const std::unique_ptr<backend> fast = make_cpu_backend(/*reference=*/false, 2);
  check_reprefill_equals_decode(w, *fast);
  // and the prefill form is not the same computation there (why num_generated exists)
  const std::vector<int32_t> prompt = {1, 900, 17, 513, 64, 1023, 2, 300};
  const decoded d = decode_steps(w, *fast, prompt, 6);
  const std::vector<int32_t> generated(d.tokens.begin(), d.tokens.begin() + 5);
  CHECK(reprefill(w, *fast, prompt, generated, /*decode_form=*/false) != d.logits[5]);
}
