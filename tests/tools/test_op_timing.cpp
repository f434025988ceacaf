// tests/tools/test_op_timing.cpp
// bench-model --op-times: the timing backend computes exactly what the backend under it does,
// and counts each op's calls and the weight bytes it reads (a routed expert once per call).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/model/forward.hpp"
#include "model/tiny_model.hpp"
#include "tools/op_timing.hpp"

using namespace moe;

TEST_CASE("op timing: a decode step through it gives the same logits, and its ops are counted") {
  const model_weights w = testing::tiny_model_builder(7).build(testing::tiny_config());
  const model_config& c = w.config;
  auto ref = make_cpu_reference_backend();
  tools::op_timing_backend timing(*ref);
  kv_cache cache_a{c.num_hidden_layers, 8, 4, c.kv_cache_dim()},
    cache_b{c.num_hidden_layers, 8, 4, c.kv_cache_dim()};
  model_runner plain(w, *ref, cache_a), timed(w, timing, cache_b);
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  sequence_kv kv_a, kv_b;
  REQUIRE(kv_a.reserve(cache_a, 5));
  REQUIRE(kv_b.reserve(cache_b, 5));
  const batch_entry pa{.tokens = prompt, .kv = &kv_a}, pb{.tokens = prompt, .kv = &kv_b};
  CHECK(plain.forward(std::span(&pa, 1)) == timed.forward(std::span(&pb, 1)));
  timing.clear();
  const int32_t next = 65;
  const batch_entry da{.tokens = std::span(&next, 1), .kv = &kv_a},
    db{.tokens = std::span(&next, 1), .kv = &kv_b};
  CHECK(plain.forward(std::span(&da, 1)) == timed.forward(std::span(&db, 1)));  // same bits

  const auto& t = timing.totals();
  int64_t moe_layers = 0;
  for (const layer_weights& l : w.layers)
    moe_layers += l.is_moe ? 1 : 0;
  REQUIRE(moe_layers > 0);
  REQUIRE(t.count("moe_experts") == 1);
  CHECK(t.at("moe_experts").calls == moe_layers);
  // one token: top_k distinct experts per MoE layer, gate + up + down each (f32: 4 bytes)
  const double expert_bytes = 3.0 * c.moe_intermediate_size * c.hidden_size * 4;
  CHECK(t.at("moe_experts").weight_bytes ==
        doctest::Approx(moe_layers * c.num_experts_per_tok * expert_bytes));
  const std::string head = "linear " + std::to_string(c.vocab_size) + "x" + std::to_string(c.hidden_size) +
                           " F32";
  REQUIRE(t.count(head) == 1);
  CHECK(t.at(head).calls == 1);
  CHECK(t.at(head).weight_bytes == doctest::Approx(4.0 * c.vocab_size * c.hidden_size));
  CHECK(t.at("mla_attention").calls == c.num_hidden_layers);
  CHECK(t.at("embedding").calls == 1);
  CHECK(t.count("linear_group " + std::to_string(*c.q_lora_rank) + "x" + std::to_string(c.hidden_size) +
                " F32 + " + std::to_string(c.kv_cache_dim()) + "x" + std::to_string(c.hidden_size) +
                " F32") == 1);
  double seconds = 0.0;  // a decode step's ops take time, and it is recorded
  for (const auto& [label, total] : t)
    seconds += total.seconds;
  CHECK(seconds > 0.0);

  // print: a header, a line per op and the total
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  REQUIRE(out != nullptr);
  timing.print(out, 1);
  std::fclose(out);
  std::string printed(text, size);
  std::free(text);
  CHECK(std::count(printed.begin(), printed.end(), '\n') == static_cast<long>(t.size() + 2));
  CHECK(printed.find("moe_experts") != std::string::npos);
  CHECK(printed.find("all ops") != std::string::npos);
  CHECK(printed.find("ms/step") != std::string::npos);
  // a prefill's breakdown names its unit in the header
  out = open_memstream(&text, &size);
  REQUIRE(out != nullptr);
  timing.print(out, 1, "prefill");
  std::fclose(out);
  printed.assign(text, size);
  std::free(text);
  CHECK(printed.find("ms/prefill") != std::string::npos);
  CHECK(printed.find("MB/prefill") != std::string::npos);
  CHECK(printed.find("ms/step") == std::string::npos);
}

TEST_CASE("op timing: a routed expert's weights count once per call, and only inside the rank's range") {
  const model_weights w = testing::tiny_model_builder(8).build(testing::tiny_config());
  const model_config& c = w.config;
  const layer_weights* moe = nullptr;
  for (const layer_weights& l : w.layers)
    if (l.is_moe && moe == nullptr)
      moe = &l;
  REQUIRE(moe != nullptr);
  REQUIRE(c.num_experts_per_tok == 4);
  auto ref = make_cpu_reference_backend();
  tools::op_timing_backend timing(*ref);
  const int64_t D = c.hidden_size, T = 2, K = 4;
  std::vector<float> x(T * D, 0.25f), out(T * D), want(T * D);
  const std::vector<int32_t> ids = {1, 3, 5, 7, 3, 1, 7, 9};  // experts 1 3 5 7 9
  const std::vector<float> weights(T * K, 0.5f);
  moe_experts_params p{.x = x.data(),
                       .topk_ids = ids.data(),
                       .topk_weights = weights.data(),
                       .out = out.data(),
                       .num_tokens = T,
                       .hidden = D,
                       .top_k = K,
                       .experts = &moe->moe.experts,
                       .expert_begin = 0,
                       .expert_end = c.n_routed_experts};
  timing.moe_experts(p);
  const double expert_bytes = 3.0 * c.moe_intermediate_size * D * 4;
  CHECK(timing.totals().at("moe_experts").weight_bytes == doctest::Approx(5 * expert_bytes));
  p.expert_begin = 2;  // a rank holding experts 2 .. 7: 3, 5 and 7
  p.expert_end = 8;
  timing.moe_experts(p);
  CHECK(timing.totals().at("moe_experts").weight_bytes == doctest::Approx(8 * expert_bytes));
  CHECK(timing.totals().at("moe_experts").calls == 2);
  p.out = want.data();
  ref->moe_experts(p);
  CHECK(out == want);  // the last call's result, as the backend under it
}
