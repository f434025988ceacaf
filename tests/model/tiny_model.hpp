// tests/model/tiny_model.hpp
// A random DeepSeek-V3-shaped model built in memory (f32 weights, or V3's FP8 layout), for
// forward-pass tests that need no checkpoint on disk. Shapes follow the "tiny" preset unless
// changed.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>

#include "kernels/model/weights.hpp"
#include "tools/lib/random_checkpoint.hpp"

namespace moe::testing {

/// The make-model "tiny" preset's config with a small vocabulary.
inline model_config tiny_config(int64_t vocab = 97) {
  return tools::make_model_config({.preset = "tiny", .vocab_size = vocab});
}

/// How the builder stores linear weights. fp8: as V3's FP8 checkpoints after the fast path's
/// load: projections and experts e4m3 with 128x128 block scales, in fp8_panels where the shape
/// fits (as the checkpoint copy repacks them); routers and lm_head BF16; the embedding f32.
enum class tiny_weights { f32, fp8 };

/// A config whose sides are multiples of 64 where V3's are, so that FP8 weights land in panels
/// (kv_a_proj_with_mqa's 96 rows do not, as the small preset's 160).
inline model_config panel_config(int64_t vocab) {
  model_config c = tools::make_model_config({.preset = "tiny", .vocab_size = vocab});
  c.hidden_size = 128;
  c.intermediate_size = 128;
  c.moe_intermediate_size = 64;
  c.num_attention_heads = 2;
  c.q_lora_rank = 64;
  c.kv_lora_rank = 64;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 32;
  c.v_head_dim = 32;
  return c;
}

class tiny_model_builder {
 public:
  explicit tiny_model_builder(uint64_t seed, tiny_weights format = tiny_weights::f32)
      : rng_(seed), format_(format) {}

  model_weights build(const model_config& c) {
    model_weights w;
    w.config = c;
    const int64_t D = c.hidden_size, H = c.num_attention_heads, dq = c.qk_head_dim();
    w.embed_tokens = linear(w, c.vocab_size, D, std::sqrt(float(D)), storage::f32);  // rows of RMS ~1
    w.lm_head = linear(w, c.vocab_size, D, 1.0f / std::sqrt(float(D)), kept_bf16());
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
        lw.moe.gate = linear(w, c.n_routed_experts, D, 2.0f, kept_bf16());
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
  enum class storage { f32, bf16, fp8 };

  // N(0,1)/sqrt(in) * scale, stored in w.owned as `as` says, else as the builder's format (bf16:
  // the values rounded; fp8: codes of value / block scale, the scale amax / 448 per 128 x 128
  // block).
  linear_weight linear(model_weights& w, int64_t out, int64_t in, float scale = 1.0f,
                       std::optional<storage> as = std::nullopt) {
    std::normal_distribution<float> normal(0.0f, scale / std::sqrt(static_cast<float>(in)));
    std::vector<float> data(static_cast<size_t>(out * in));
    for (float& v : data)
      v = normal(rng_);
    const storage kind = as.value_or(format_ == tiny_weights::fp8 ? storage::fp8 : storage::f32);
    if (kind == storage::bf16)
      return to_bf16(w, data, out, in);
    if (kind == storage::fp8)
      return to_fp8(w, data, out, in);
    w.owned.push_back(std::move(data));
    return {.type = dtype::f32, .data = w.owned.back().data(), .out_features = out, .in_features = in};
  }
  // The weights V3 keeps BF16 in its FP8 checkpoints (the lm_head, the routers).
  [[nodiscard]] storage kept_bf16() const {
    return format_ == tiny_weights::fp8 ? storage::bf16 : storage::f32;
  }

  // `n` bytes of storage owned by `w` (a float vector, so model_weights::owned can hold it).
  static void* bytes(model_weights& w, int64_t n) {
    w.owned.emplace_back(static_cast<size_t>((n + 3) / 4));
    return w.owned.back().data();
  }
  static linear_weight to_bf16(model_weights& w, const std::vector<float>& v, int64_t out, int64_t in) {
    auto* b = static_cast<uint16_t*>(bytes(w, out * in * 2));
    for (size_t i = 0; i < v.size(); ++i)
      b[i] = f32_to_bf16(v[i]);
    return {.type = dtype::bf16, .data = b, .out_features = out, .in_features = in};
  }
  static linear_weight to_fp8(model_weights& w, const std::vector<float>& v, int64_t out, int64_t in) {
    const int64_t brows = (out + 127) / 128, bcols = (in + 127) / 128;
    std::vector<float> scales(static_cast<size_t>(brows * bcols), 0.0f);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        float& s = scales[static_cast<size_t>((o / 128) * bcols + i / 128)];
        s = std::max(s, std::abs(v[static_cast<size_t>(o * in + i)]) / 448.0f);
      }
    const bool panels = fp8_panels_fit(out, in);
    auto* codes = static_cast<uint8_t*>(bytes(w, out * in));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const float s = scales[static_cast<size_t>((o / 128) * bcols + i / 128)];
        codes[panels ? fp8_panel_offset(o, i, in) : o * in + i] =
          f32_to_fp8_e4m3(s > 0.0f ? v[static_cast<size_t>(o * in + i)] / s : 0.0f);
      }
    w.owned.push_back(std::move(scales));
    return {.type = dtype::f8_e4m3,
            .data = codes,
            .layout = panels ? weight_layout::fp8_panels : weight_layout::row_major,
            .out_features = out,
            .in_features = in,
            .scale_inv = w.owned.back().data(),
            .block_rows = 128,
            .block_cols = 128};
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
  tiny_weights format_;
};

}  // namespace moe::testing
