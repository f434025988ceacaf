// tests/tools/test_model_flops.cpp
// A forward pass's FLOPs from the config, against the tiny preset worked by hand.
#include <doctest/doctest.h>

#include "tools/lib/random_checkpoint.hpp"
#include "tools/model_flops.hpp"

using namespace moe;

TEST_CASE("model flops: the tiny preset's prefill, by hand") {
  // tiny: hidden 64, 3 layers (layer 0 dense, intermediate 128), 4 heads, q_lora 32, kv_lora 16,
  // nope 16, rope 8, v 16, 16 experts top-4, 1 shared, moe_intermediate 32; vocab 97.
  const model_config c = tools::make_model_config({.preset = "tiny", .vocab_size = 97});
  REQUIRE(c.num_hidden_layers == 3);
  REQUIRE(c.first_k_dense_replace == 1);
  // per layer and token, multiply-adds: q_a 64*32 = 2048, q_b 32*4*24 = 3072, kv_a 64*24 = 1536,
  // W_UK 4*16*16 = 1024, W_UV 4*16*16 = 1024, o_proj 64*64 = 4096: 12800 (25600 FLOPs);
  // dense MLP 3*64*128 = 24576 (49152); MoE: router 64*16 = 1024, 5 experts of 3*64*32 = 6144:
  // 31744 (63488). 3 * 25600 + 49152 + 2 * 63488 = 252928.
  CHECK(tools::token_matmul_flops(c) == 252928.0);
  // a key: score over 16 + 8, weighted sum over 16: 40 multiply-adds per head, 4 heads, 3 layers
  CHECK(tools::key_attention_flops(c) == 2.0 * 40 * 4 * 3);
  const double lm_head = 2.0 * 64 * 97;  // 12416
  CHECK(tools::prefill_flops(c, 1) == 252928.0 + 960.0 + lm_head);
  // With more tokens, the last layer (MoE) runs past its q / kv projections on the logit row
  // alone: each other token skips W_UK 1024 + W_UV 1024 + o_proj 4096 + MoE 31744 = 37888
  // multiply-adds (75776 FLOPs) and its attention there (320 FLOPs a key: 960 over 3 layers).
  CHECK(tools::prefill_flops(c, 2) == 2 * 252928.0 + 3 * 960.0 + lm_head - 75776.0 - 1 * 320.0);
  CHECK(tools::prefill_flops(c, 3) == 3 * 252928.0 + 6 * 960.0 + lm_head - 2 * 75776.0 - 3 * 320.0);
  // 512 tokens at V3's vocabulary: 191,539,200, as a backend that counts every call's
  // multiply-adds through model_runner measured (a review's harness, session 17)
  const model_config v3_vocab = tools::make_model_config({.preset = "tiny"});
  CHECK(tools::prefill_flops(v3_vocab, 512) == 191539200.0);

  // the tiny preset's naive key costs what its absorbed key does (16 + 8 + 16 = 2 * 16 + 8)
  CHECK(tools::key_attention_flops(c, attention_form::naive) == 2.0 * 40 * 4 * 3);

  model_config no_lora = c;  // q_proj 64 x 4*24 instead of q_a, q_b
  no_lora.q_lora_rank.reset();
  CHECK(tools::token_matmul_flops(no_lora) == 252928.0 + 3 * 2.0 * (64 * 96 - 2048 - 3072));
}

TEST_CASE("model flops: the small preset's naive prefill attention, by hand") {
  // small: 8 layers, 16 heads, kv_lora 128, nope 64, rope 32, v 64. A key costs a query head
  // 64 + 32 + 64 = 160 multiply-adds naive, 2 * 128 + 32 = 288 absorbed.
  const model_config c = tools::make_model_config({.preset = "small", .vocab_size = 1000});
  CHECK(tools::key_attention_flops(c, attention_form::naive) == 2.0 * 160 * 16 * 8);
  CHECK(tools::key_attention_flops(c, attention_form::absorbed) == 2.0 * 288 * 16 * 8);
  // 4 tokens: 10 (query, key) pairs a layer in 7 naive layers; the last layer the logit row's
  // 4 keys in the decode form (absorbed by default), so only the 7 layers differ
  CHECK(tools::prefill_flops(c, 4) -
          tools::prefill_flops(c, 4, attention_forms::all(attention_form::absorbed)) ==
        doctest::Approx(10.0 * 7 * 2 * (160 - 288) * 16));
  CHECK(tools::prefill_flops(c, 4, attention_forms::all(attention_form::naive)) -
          tools::prefill_flops(c, 4, attention_forms::all(attention_form::absorbed)) ==
        doctest::Approx(10.0 * 7 * 2 * (160 - 288) * 16 + 4.0 * 2 * (160 - 288) * 16));
}
