// tests/model/test_kv_handoff.cpp
// A prompt prefilled on one cache and handed to another decodes exactly as if it had stayed.
#include <doctest/doctest.h>

#include "kernels/model/forward.hpp"
#include "kernels/model/kv_handoff.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

TEST_CASE("decode after a KV hand-off equals decode on the prefill cache") {
  const model_weights w = testing::tiny_model_builder(11).build(testing::tiny_config());
  auto ref = make_cpu_reference_backend();
  kv_cache prefill_cache(w.config.num_hidden_layers, 8, 4, w.config.kv_cache_dim());
  kv_cache decode_cache(w.config.num_hidden_layers, 6, 4, w.config.kv_cache_dim());
  model_runner prefill(w, *ref, prefill_cache), decode(w, *ref, decode_cache);
  const std::vector<int32_t> prompt = {0, 9, 30, 31, 77, 5};
  const std::vector<int32_t> next = {42};

  sequence_kv here;
  REQUIRE(here.reserve(prefill_cache, 7));
  const batch_entry p{.tokens = prompt, .kv = &here};
  (void)prefill.forward(std::span(&p, 1));
  const kv_pages pages = export_kv(prefill_cache, here, here.num_cached);
  CHECK(pages.data.size() == static_cast<size_t>(3 * 6 * w.config.kv_cache_dim()));

  sequence_kv there;
  REQUIRE(there.reserve(decode_cache, 7));
  import_kv(decode_cache, there, pages);
  CHECK(there.num_cached == 6);
  const batch_entry a{.tokens = next, .kv = &here, .decode = true},
    b{.tokens = next, .kv = &there, .decode = true};
  CHECK(prefill.forward(std::span(&a, 1)) == decode.forward(std::span(&b, 1)));  // bit-identical

  here.release(prefill_cache);
  there.release(decode_cache);
  CHECK(prefill_cache.num_free_blocks() == 8);
  CHECK(decode_cache.num_free_blocks() == 6);
  kv_pages wrong = pages;
  wrong.kv_dim += 1;
  CHECK_THROWS_AS(import_kv(decode_cache, there, wrong), std::invalid_argument);
}
