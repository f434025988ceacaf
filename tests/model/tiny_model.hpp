// tests/model/tiny_model.hpp
// A random DeepSeek-V3-shaped model built in memory (f32 weights), for forward-pass tests that
// need no checkpoint on disk. Shapes follow the "tiny" preset unless changed.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

#include "kernels/model/weights.hpp"
#include "tools/make_model.hpp"

namespace moe::testing {

/// The make-model "tiny" preset's config with a small vocabulary.
inline model_config tiny_config(int64_t vocab = 97) {
  return tools::make_model_config({.preset = "tiny", .vocab_size = vocab});
}

class tiny_model_builder {
public:
  explicit tiny_model_builder(uint64_t seed) : rng_(seed) {}

  model_weights build(const model_config& c) {
    model_weights w;
    w.config = c;
    const int64_t D = c.hidden_size, H = c.num_attention_heads, dq = c.qk_head_dim();
    w.embed_tokens = linear(w, c.vocab_size, D, std::sqrt(float(D)));   // rows of RMS ~1
    w.lm_head = linear(w, c.vocab_size, D, 1.0f / std::sqrt(float(D)));
    w.norm = norm(D);
    const float out_scale = 1.0f / std::sqrt(2.0f * c.num_hidden_layers);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      layer_weights lw;
      lw.input_layernorm = norm(D);
      lw.post_attention_layernorm = norm(D);
      attention_weights& a = lw.attn;
      if (c.q_lora_rank) {
        a.q_a_proj = linear(w, *c.q_lora_rank, D);
        a.q_a_layernorm = norm(*c.q_lora_rank);
        a.q_b_proj = linear(w, H * dq, *c.q_lora_rank);
      } else {
        a.q_proj = linear(w, H * dq, D);
      }
      a.kv_a_proj_with_mqa = linear(w, c.kv_cache_dim(), D);
      a.kv_a_layernorm = norm(c.kv_lora_rank);
      a.kv_b_proj = linear(w, H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank);
      a.o_proj = linear(w, D, H * c.v_head_dim, out_scale);
      lw.is_moe = c.is_moe_layer(l);
      if (!lw.is_moe) {
        lw.mlp = mlp(w, c.intermediate_size, D, out_scale);
      } else {
        lw.moe.gate = linear(w, c.n_routed_experts, D, 2.0f);
        std::uniform_real_distribution<float> bias(-0.05f, 0.05f);
        for (int64_t e = 0; e < c.n_routed_experts; ++e) {
          lw.moe.e_score_correction_bias.push_back(bias(rng_));
          lw.moe.experts.push_back(mlp(w, c.moe_intermediate_size, D, out_scale));
        }
        lw.moe.shared_experts = mlp(w, c.shared_intermediate_size(), D, out_scale);
      }
      w.layers.push_back(std::move(lw));
    }
    return w;
  }

private:
  // N(0,1)/sqrt(in) * scale, stored f32 in w.owned
  linear_weight linear(model_weights& w, int64_t out, int64_t in, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale / std::sqrt(static_cast<float>(in)));
    std::vector<float> data(static_cast<size_t>(out * in));
    for (float& v : data)
      v = normal(rng_);
    w.owned.push_back(std::move(data));
    return {.type = dtype::f32, .data = w.owned.back().data(), .out_features = out, .in_features = in};
  }
  mlp_weights mlp(model_weights& w, int64_t inter, int64_t D, float out_scale) {
    return {linear(w, inter, D), linear(w, inter, D), linear(w, D, inter, out_scale)};
  }
  std::vector<float> norm(int64_t n) {
    std::uniform_real_distribution<float> u(0.8f, 1.2f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v)
      x = u(rng_);
    return v;
  }
  std::mt19937_64 rng_;
};

}  // namespace moe::testing
