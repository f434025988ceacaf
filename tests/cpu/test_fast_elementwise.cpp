// tests/cpu/test_fast_elementwise.cpp
// The fast backend's per-token ops against the reference: vectorised RMSNorm, silu * up, adds
// and embedding (fp32, a few ulp), and the range-split RoPE / router (bit-identical).
#include <doctest/doctest.h>

#include <cstring>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

TEST_CASE("fast: rms_norm, silu_mul, add and embedding match the reference") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast(2);
  for (int64_t tokens : {1, 3, 17, 64, 200}) {
    CAPTURE(tokens);
    const int64_t dim = 1000, stride = 1040;  // dim not a multiple of 16
    const auto x = test::random_floats(tokens * stride, 1u + static_cast<uint32_t>(tokens));
    const auto weight = test::random_floats(dim, 2);
    std::vector<float> want = x, got = x;
    ref.rms_norm({.x = want.data(),
                  .weight = weight.data(),
                  .out = want.data(),
                  .num_tokens = tokens,
                  .dim = dim,
                  .stride = stride});
    fast.rms_norm({.x = got.data(),
                   .weight = weight.data(),
                   .out = got.data(),
                   .num_tokens = tokens,
                   .dim = dim,
                   .stride = stride});
    CHECK(test::max_rel_error(got, want) < 5e-6);  // fp32 vs fp64 sum: a few ulp
    for (int64_t t = 0; t < tokens; ++t)           // the gap between rows is untouched
      CHECK(std::memcmp(got.data() + t * stride + dim, x.data() + t * stride + dim, (stride - dim) * 4) == 0);

    const auto up = test::random_floats(tokens * dim, 3);
    std::vector<float> s_want(tokens * dim), s_got(tokens * dim);
    ref.silu_mul({.gate = x.data(), .up = up.data(), .out = s_want.data(), .num_tokens = tokens, .dim = dim});
    fast.silu_mul({.gate = x.data(), .up = up.data(), .out = s_got.data(), .num_tokens = tokens, .dim = dim});
    CHECK(test::max_rel_error(s_got, s_want) < 5e-6);  // vector exp: ~2 ulp

    std::vector<float> a_want = up, a_got = up;
    ref.add({.out = a_want.data(), .x = x.data(), .n = tokens * dim});
    fast.add({.out = a_got.data(), .x = x.data(), .n = tokens * dim});
    CHECK(test::same_bits(a_got, a_want));

    for (dtype type : {dtype::bf16, dtype::f32, dtype::f8_e4m3}) {
      const auto table = test::random_weight(type, 300, dim, 4);
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < tokens; ++t)
        ids.push_back(static_cast<int32_t>((t * 37) % 300));
      std::vector<float> e_want(tokens * dim), e_got(tokens * dim);
      ref.embedding({.table = &table->w, .ids = ids.data(), .out = e_want.data(), .num_tokens = tokens});
      fast.embedding({.table = &table->w, .ids = ids.data(), .out = e_got.data(), .num_tokens = tokens});
      CHECK(test::same_bits(e_got, e_want));
    }
  }
}

TEST_CASE("fast: rope and moe_gate split by tokens are bit-identical to the reference") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast(2);
  for (int64_t tokens : {1, 3, 17, 64, 200}) {
    CAPTURE(tokens);
    const int64_t heads = 16, head_stride = 96, rope_dim = 32;
    std::vector<int32_t> positions;
    for (int64_t t = 0; t < tokens; ++t)
      positions.push_back(static_cast<int32_t>(t * 3 + 1));
    const auto inv_freq = test::random_floats(rope_dim / 2, 5, 0.1f);
    const auto q = test::random_floats(tokens * heads * head_stride, 6);
    std::vector<float> want = q, got = q;
    for (auto* buf : {&want, &got}) {
      backend& b = buf == &want ? static_cast<backend&>(ref) : static_cast<backend&>(fast);
      b.rope({.x = buf->data() + 64,
              .num_tokens = tokens,
              .num_heads = heads,
              .token_stride = heads * head_stride,
              .head_stride = head_stride,
              .rope_dim = rope_dim,
              .positions = positions.data(),
              .inv_freq = inv_freq.data(),
              .attention_factor = 1.2f});
    }
    CHECK(test::same_bits(got, want));

    const int64_t experts = 64, top_k = 8;
    const auto logits = test::random_floats(tokens * experts, 7);
    const auto bias = test::random_floats(experts, 8, 0.1f);
    std::vector<int32_t> ids_want(tokens * top_k), ids_got(tokens * top_k);
    std::vector<float> w_want(tokens * top_k), w_got(tokens * top_k);
    const moe_gate_params gate{.logits = logits.data(),
                               .bias = bias.data(),
                               .num_tokens = tokens,
                               .num_experts = experts,
                               .num_groups = 8,
                               .topk_group = 4,
                               .top_k = top_k,
                               .norm_topk_prob = true,
                               .routed_scaling_factor = 2.5f};
    moe_gate_params g1 = gate, g2 = gate;
    g1.topk_ids = ids_want.data(), g1.topk_weights = w_want.data();
    g2.topk_ids = ids_got.data(), g2.topk_weights = w_got.data();
    ref.moe_gate(g1);
    fast.moe_gate(g2);
    CHECK(ids_got == ids_want);
    CHECK(test::same_bits(w_got, w_want));
  }
}
