// tests/tools/test_bench_weights.cpp
// bench-model's paired read covers exactly the bytes weight_bytes_per_token counts (FP8 block
// scales included), with top_k distinct routed experts per MoE layer that change from call to call.
#include <doctest/doctest.h>

#include <set>

#include "model/tiny_model.hpp"
#include "tools/bench_weights.hpp"

using namespace moe;

TEST_CASE("a token's weight spans add up to weight_bytes_per_token, with top_k experts per layer") {
  model_weights w = testing::tiny_model_builder(5).build(testing::tiny_config(300));
  // an FP8 lm_head [300, 64] with a 3 x 1 grid of 128 x 128 block scales (the last one partial)
  std::vector<float> scales = {1.0f, 2.0f, 3.0f};
  w.lm_head.type = dtype::f8_e4m3;
  w.lm_head.scale_inv = scales.data();
  const model_config& c = w.config;
  REQUIRE(c.vocab_size == 300);
  REQUIRE(c.hidden_size == 64);

  std::set<const void*> experts_of_call[2];
  for (const int64_t call : {0, 1}) {
    CAPTURE(call);
    const auto spans = moe::tools::token_weight_spans(w, call);
    int64_t total = 0;
    for (const auto& s : spans)
      total += static_cast<int64_t>(s.size());
    CHECK(total == weight_bytes_per_token(w));
    CHECK(spans.back().data() == reinterpret_cast<const uint8_t*>(scales.data()));
    CHECK(spans.back().size() == 3 * 4);
    CHECK(spans[spans.size() - 2].size() == 300 * 64);  // the FP8 head itself, a byte each
    for (const layer_weights& l : w.layers) {
      if (!l.is_moe)
        continue;
      int64_t chosen = 0;
      for (const mlp_weights& e : l.moe.experts)
        for (const auto& s : spans)
          if (s.data() == e.gate_proj.data) {
            ++chosen;
            experts_of_call[call].insert(e.gate_proj.data);
          }
      CHECK(chosen == c.num_experts_per_tok);  // distinct experts: each found once
    }
  }
  CHECK(experts_of_call[0] != experts_of_call[1]);
}

TEST_CASE("a BF16 weight packed ahead is read from its packed copy") {
  model_weights w = testing::tiny_model_builder(5).build(testing::tiny_config(300));
  std::vector<uint16_t> head(300 * 64, 0), panels(320 * 64, 0);
  w.lm_head = {.type = dtype::bf16,
               .data = head.data(),
               .out_features = 300,
               .in_features = 64,
               .gemm_panels = panels.data()};
  const auto spans = moe::tools::token_weight_spans(w, 0);
  CHECK(spans.back().data() == reinterpret_cast<const uint8_t*>(panels.data()));
  CHECK(spans.back().size() == 300 * 64 * 2);
}
