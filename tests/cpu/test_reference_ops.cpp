// tests/cpu/test_reference_ops.cpp
// The CPU reference ops on hand-computed cases (model-spec worked examples where it has them).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/reference_backend.hpp"

using namespace moe;

TEST_CASE("moe_gate: the model-spec 5.7 worked example") {
  cpu_reference_backend b;
  const std::vector<float> logits = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 0.5f, -2.0f, 3.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, -0.9f};
  int32_t ids[2];
  float weights[2];
  b.moe_gate({.logits = logits.data(),
              .bias = bias.data(),
              .topk_ids = ids,
              .topk_weights = weights,
              .num_tokens = 1,
              .num_experts = 8,
              .num_groups = 4,
              .topk_group = 2,
              .top_k = 2,
              .norm_topk_prob = true,
              .routed_scaling_factor = 2.5f});
  CHECK(ids[0] == 3);  // biased 0.880797 beats 0.768941
  CHECK(ids[1] == 2);
  CHECK(weights[0] == doctest::Approx(1.915212).epsilon(1e-6));
  CHECK(weights[1] == doctest::Approx(0.584788).epsilon(1e-6));
}

TEST_CASE("moe_gate: without normalisation weights are raw sigmoid scores times the scale") {
  cpu_reference_backend b;
  const std::vector<float> logits = {0.0f, 2.0f, -1.0f, 1.0f};
  int32_t ids[2];
  float weights[2];
  b.moe_gate({.logits = logits.data(),
              .bias = nullptr,
              .topk_ids = ids,
              .topk_weights = weights,
              .num_tokens = 1,
              .num_experts = 4,
              .num_groups = 1,
              .topk_group = 1,
              .top_k = 2,
              .norm_topk_prob = false,
              .routed_scaling_factor = 2.0f});
  CHECK(ids[0] == 1);
  CHECK(ids[1] == 3);
  CHECK(weights[0] == doctest::Approx(2.0 / (1.0 + std::exp(-2.0))));
  CHECK(weights[1] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))));
}

TEST_CASE("rms_norm: hand-computed row, strided in place") {
  cpu_reference_backend b;
  // row [3, 4] -> rms = sqrt((9+16)/2) = 3.5355339; weight [1, 2]
  std::vector<float> x = {3.0f, 4.0f, 99.0f};  // third value is outside dim
  const std::vector<float> w = {1.0f, 2.0f};
  b.rms_norm({.x = x.data(),
              .weight = w.data(),
              .out = x.data(),
              .num_tokens = 1,
              .dim = 2,
              .stride = 3,
              .eps = 0.0f});
  CHECK(x[0] == doctest::Approx(3.0 / 3.5355339));
  CHECK(x[1] == doctest::Approx(8.0 / 3.5355339));
  CHECK(x[2] == 99.0f);
}

TEST_CASE("rope: adjacent pairs turn by pos * inv_freq, scaled by the attention factor") {
  cpu_reference_backend b;
  std::vector<float> x = {1.0f, 0.0f, 0.0f, 1.0f};  // pairs (x0,x1), (x2,x3)
  const std::vector<float> inv_freq = {0.5f, 0.25f};
  const int32_t pos = 2;
  b.rope({.x = x.data(),
          .num_tokens = 1,
          .num_heads = 1,
          .token_stride = 4,
          .head_stride = 0,
          .rope_dim = 4,
          .positions = &pos,
          .inv_freq = inv_freq.data(),
          .attention_factor = 2.0f});
  CHECK(x[0] == doctest::Approx(2.0 * std::cos(1.0)));  // (1,0) turned by 1 rad
  CHECK(x[1] == doctest::Approx(2.0 * std::sin(1.0)));
  CHECK(x[2] == doctest::Approx(-2.0 * std::sin(0.5)));  // (0,1) turned by 0.5 rad
  CHECK(x[3] == doctest::Approx(2.0 * std::cos(0.5)));
}

TEST_CASE("silu_mul and add") {
  cpu_reference_backend b;
  const std::vector<float> gate = {0.0f, 1.0f, -2.0f}, up = {5.0f, 2.0f, 3.0f};
  std::vector<float> out(3);
  b.silu_mul({.gate = gate.data(), .up = up.data(), .out = out.data(), .num_tokens = 1, .dim = 3});
  CHECK(out[0] == doctest::Approx(0.0));
  CHECK(out[1] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))));
  CHECK(out[2] == doctest::Approx(3.0 * -2.0 / (1.0 + std::exp(2.0))));
  b.add({.out = out.data(), .x = up.data(), .n = 3});
  CHECK(out[0] == doctest::Approx(5.0));
}

TEST_CASE("linear: FP8 weights with partial 2x2 blocks multiply by their block scale") {
  cpu_reference_backend b;
  // W [3, 3] in blocks of 2x2: scale grid [2, 2]; every stored value is e4m3 1.0 (0x38)
  std::vector<uint8_t> q(9, 0x38);
  q[8] = 0xB8;  // W[2,2] = -1 * scale[1,1]
  const std::vector<float> scale = {1.0f, 2.0f, 3.0f, 4.0f};
  const linear_weight w{.type = dtype::f8_e4m3,
                        .data = q.data(),
                        .out_features = 3,
                        .in_features = 3,
                        .scale_inv = scale.data(),
                        .block_rows = 2,
                        .block_cols = 2};
  const std::vector<float> x = {1.0f, 10.0f, 100.0f};
  std::vector<float> y(3);
  b.linear({.x = x.data(), .w = &w, .out = y.data(), .num_tokens = 1});
  CHECK(y[0] == doctest::Approx(1 * 1 + 10 * 1 + 100 * 2));  // row 0: scales [1, 1, 2]
  CHECK(y[1] == doctest::Approx(1 * 1 + 10 * 1 + 100 * 2));
  CHECK(y[2] == doctest::Approx(1 * 3 + 10 * 3 - 100 * 4));  // row 2: scales [3, 3, 4]
}

TEST_CASE("mla_attention: one cached token returns W_UV c_kv in both forms") {
  cpu_reference_backend b;
  // H=1, dn=1, dr=2, dv=2, C=2. kv_b_proj rows: [k_nope (1) | v (2)] x C
  const std::vector<float> kv_b = {1.0f, 0.0f,   // W_UK
                                   2.0f, 1.0f,   // W_UV row 0
                                   0.0f, 3.0f};  // W_UV row 1
  const linear_weight w{.type = dtype::f32, .data = kv_b.data(), .out_features = 3, .in_features = 2};
  std::vector<float> storage = {0.5f, -1.0f, 0.1f, 0.2f};  // one slot: c_kv [0.5, -1], k_rope
  const int32_t table[] = {0};
  const int32_t* tables[] = {table};
  const int32_t seq = 0, pos = 0;
  const std::vector<float> q = {0.3f, 1.0f, -1.0f};
  for (auto form : {attention_form::naive, attention_form::absorbed}) {
    std::vector<float> out(2);
    b.mla_attention({.q = q.data(),
                     .out = out.data(),
                     .num_tokens = 1,
                     .num_heads = 1,
                     .nope_dim = 1,
                     .rope_dim = 2,
                     .v_dim = 2,
                     .kv_lora_rank = 2,
                     .kv_b_proj = &w,
                     .softmax_scale = 0.7f,
                     .form = form,
                     .cache = {.base = storage.data(), .block_size = 1, .kv_dim = 4},
                     .layout = {.seq_idx = &seq, .positions = &pos, .block_tables = tables}});
    CHECK(out[0] == doctest::Approx(2 * 0.5 + 1 * -1.0));  // softmax over one key is 1
    CHECK(out[1] == doctest::Approx(3 * -1.0));
  }
}

TEST_CASE("mla_attention: two keys weigh values by softmax of scaled scores") {
  cpu_reference_backend b;
  // H=1, dn=1, dr=0... use dr=2 with zero rope; C=1, dv=1: kv_b = [[1], [1]] -> k = v = c
  const std::vector<float> kv_b = {1.0f, 1.0f};
  const linear_weight w{.type = dtype::f32, .data = kv_b.data(), .out_features = 2, .in_features = 1};
  std::vector<float> storage = {1.0f, 0.0f, 0.0f, 3.0f, 0.0f, 0.0f};  // c = 1 at pos 0, 3 at pos 1
  const int32_t table[] = {0, 1};
  const int32_t* tables[] = {table};
  const int32_t seq = 0, pos = 1;
  const std::vector<float> q = {2.0f, 0.0f, 0.0f};
  // scores: 2*1*0.5 = 1, 2*3*0.5 = 3 -> p = [1, e^2] / (1 + e^2); out = p0*1 + p1*3
  const double e2 = std::exp(2.0), expected = (1.0 + 3.0 * e2) / (1.0 + e2);
  for (auto form : {attention_form::naive, attention_form::absorbed}) {
    float out = 0.0f;
    b.mla_attention({.q = q.data(),
                     .out = &out,
                     .num_tokens = 1,
                     .num_heads = 1,
                     .nope_dim = 1,
                     .rope_dim = 2,
                     .v_dim = 1,
                     .kv_lora_rank = 1,
                     .kv_b_proj = &w,
                     .softmax_scale = 0.5f,
                     .form = form,
                     .cache = {.base = storage.data(), .block_size = 1, .kv_dim = 3},
                     .layout = {.seq_idx = &seq, .positions = &pos, .block_tables = tables}});
    CHECK(out == doctest::Approx(expected));
  }
}
