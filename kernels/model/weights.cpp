// kernels/model/weights.cpp
// Binds every tensor of model-spec section 3 to model_weights, checking dtype and shape against
// config.json. Linear weights stay views into the mapping; norms and biases become f32 vectors.
#include "kernels/model/weights.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/checkpoint/checkpoint.hpp"

namespace moe {
namespace {

std::string layer_prefix(int64_t layer_idx) { return "model.layers." + std::to_string(layer_idx) + "."; }

[[noreturn]] void dtype_error(const tensor_info& t, std::string_view role, std::string_view expected) {
  throw input_error(t.file + ": tensor \"" + t.name + "\": dtype " + std::string(dtype_name(t.type)) +
                    " is not supported for " + std::string(role) + " (expected " + std::string(expected) +
                    ")");
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// NaN and infinite values in any tensor are refused when the file is opened (check_finite).
std::string number_text(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(v));
  return text;
}

// An FP8 block scale is 0 (an all-zero block) or a normal float in [2^-126, 2^63]: block
// quantisation never writes a negative one, the fast kernels read a subnormal one as zero (they
// run with denormals-are-zero) and multiply the scale by 2^64 (fast_linear.hpp fp8_block_sum).
// Real checkpoints' scales are ~1e-4.
void check_scales(const tensor_info& t, const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(v[i] == 0.0f || (v[i] >= std::ldexp(1.0f, -126) && v[i] <= std::ldexp(1.0f, 63))))
      throw input_error(t.file + ": tensor \"" + t.name + "\": element " + std::to_string(i) + " is " +
                        number_text(v[i]) + " (expected an FP8 block scale: 0, or from 2^-126 to 2^63)");
}

// Reads tensors out of the checkpoint into `w`, copying into `w.owned` only what must be copied.
struct loader {
  const checkpoint& ckpt;
  model_weights& w;
  int64_t block_rows = 128;
  int64_t block_cols = 128;

  // A new owned buffer of at least `num_bytes`, 4-aligned. Inner vectors keep their heap buffer
  // when `owned` grows, so earlier pointers stay valid.
  float* own(int64_t num_bytes) {
    w.owned.emplace_back(static_cast<size_t>((num_bytes + 3) / 4));
    return w.owned.back().data();
  }

  // The tensor's data, copied into owned storage if not aligned to its element size.
  const void* aligned_data(const tensor_info& t) {
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(t.type)) == 0)
      return t.data;
    float* copy = own(t.num_bytes);
    std::memcpy(copy, t.data, static_cast<size_t>(t.num_bytes));
    return copy;
  }

  // [n] float-typed tensor -> f32 vector (norm weights, router bias).
  std::vector<float> vector_f32(const std::string& name, int64_t n, std::string_view role) {
    const tensor_info& t = ckpt.tensor(name, {n});
    if (t.type != dtype::f32 && t.type != dtype::bf16 && t.type != dtype::f16)
      dtype_error(t, role, "F32, BF16 or F16");
    std::vector<float> out(static_cast<size_t>(n));
    to_f32(t, out.data());
    return out;
  }

  static void to_f32(const tensor_info& t, float* out) {
    const int64_t size = dtype_size(t.type);
    const int64_t n = t.num_bytes / size;
    for (int64_t i = 0; i < n; ++i) {  // memcpy per element: data may be unaligned
      uint32_t bits = 0;
      std::memcpy(&bits, t.data + i * size, static_cast<size_t>(size));
      out[i] = t.type == dtype::f32    ? std::bit_cast<float>(bits)
               : t.type == dtype::bf16 ? bf16_to_f32(static_cast<uint16_t>(bits))
                                       : f16_to_f32(static_cast<uint16_t>(bits));
    }
  }

  // Block scales of an FP8 weight [out, in]: f32 [ceil(out/block_rows), ceil(in/block_cols)].
  const float* scale_inv(const tensor_info& weight, int64_t out, int64_t in) {
    const std::string name = weight.name + "_scale_inv";
    if (!ckpt.contains(name))
      throw input_error(weight.file + ": tensor \"" + weight.name + "\" is F8_E4M3 but its scale \"" + name +
                        "\" is missing from " + ckpt.dir().string());
    const tensor_info& s = ckpt.tensor(name, {ceil_div(out, block_rows), ceil_div(in, block_cols)});
    const int64_t n = ceil_div(out, block_rows) * ceil_div(in, block_cols);
    const float* scales = nullptr;
    if (s.type == dtype::f32) {
      scales = static_cast<const float*>(aligned_data(s));
    } else {
      if (s.type != dtype::bf16 && s.type != dtype::f16)
        dtype_error(s, "an FP8 block scale", "F32, BF16 or F16");
      float* converted = own(n * 4);
      to_f32(s, converted);
      scales = converted;
    }
    check_scales(s, scales, n);
    return scales;
  }

  // nn.Linear weight [out, in]; FP8 ones come with their block scales.
  linear_weight linear(const std::string& name, int64_t out, int64_t in, bool allow_fp8 = true) {
    const tensor_info& t = ckpt.tensor(name, {out, in});
    if (t.type == dtype::f8_e4m3 && !allow_fp8)
      dtype_error(t, "the router (never FP8)", "BF16, F16 or F32");
    if (t.type != dtype::bf16 && t.type != dtype::f16 && t.type != dtype::f32 && t.type != dtype::f8_e4m3)
      dtype_error(t, "a linear weight", "BF16, F16, F32 or F8_E4M3");
    linear_weight lw;
    lw.type = t.type;
    lw.data = aligned_data(t);
    lw.layout = t.layout;
    lw.out_features = out;
    lw.in_features = in;
    lw.block_rows = block_rows;
    lw.block_cols = block_cols;
    if (t.type == dtype::f8_e4m3)
      lw.scale_inv = scale_inv(t, out, in);
    return lw;
  }

  mlp_weights mlp(const std::string& prefix, int64_t width) {
    const int64_t d = w.config.hidden_size;
    return {linear(prefix + "gate_proj.weight", width, d), linear(prefix + "up_proj.weight", width, d),
            linear(prefix + "down_proj.weight", d, width)};
  }

  attention_weights attention(const std::string& prefix) {
    const model_config& c = w.config;
    const int64_t d = c.hidden_size, h = c.num_attention_heads;
    attention_weights a;
    if (c.q_lora_rank) {
      a.q_a_proj = linear(prefix + "q_a_proj.weight", *c.q_lora_rank, d);
      a.q_a_layernorm = vector_f32(prefix + "q_a_layernorm.weight", *c.q_lora_rank, "a norm weight");
      a.q_b_proj = linear(prefix + "q_b_proj.weight", h * c.qk_head_dim(), *c.q_lora_rank);
    } else {
      a.q_proj = linear(prefix + "q_proj.weight", h * c.qk_head_dim(), d);
    }
    a.kv_a_proj_with_mqa = linear(prefix + "kv_a_proj_with_mqa.weight", c.kv_cache_dim(), d);
    a.kv_a_layernorm = vector_f32(prefix + "kv_a_layernorm.weight", c.kv_lora_rank, "a norm weight");
    a.kv_b_proj = linear(prefix + "kv_b_proj.weight", h * (c.qk_nope_head_dim + c.v_head_dim),
                         c.kv_lora_rank);
    a.o_proj = linear(prefix + "o_proj.weight", d, h * c.v_head_dim);
    return a;
  }

  moe_weights moe(const std::string& prefix) {
    const model_config& c = w.config;
    moe_weights m;
    m.gate = linear(prefix + "gate.weight", c.n_routed_experts, c.hidden_size, /*allow_fp8=*/false);
    m.e_score_correction_bias = vector_f32(prefix + "gate.e_score_correction_bias", c.n_routed_experts,
                                           "the router bias");
    m.experts.reserve(static_cast<size_t>(c.n_routed_experts));
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      m.experts.push_back(mlp(prefix + "experts." + std::to_string(e) + ".", c.moe_intermediate_size));
    if (c.n_shared_experts > 0)
      m.shared_experts = mlp(prefix + "shared_experts.", c.shared_intermediate_size());
    return m;
  }

  layer_weights layer(int64_t layer_idx) {
    const std::string prefix = layer_prefix(layer_idx);
    const int64_t d = w.config.hidden_size;
    layer_weights l;
    l.input_layernorm = vector_f32(prefix + "input_layernorm.weight", d, "a norm weight");
    l.post_attention_layernorm = vector_f32(prefix + "post_attention_layernorm.weight", d, "a norm weight");
    l.attn = attention(prefix + "self_attn.");
    l.is_moe = w.config.is_moe_layer(layer_idx);
    if (l.is_moe)
      l.moe = moe(prefix + "mlp.");
    else
      l.mlp = mlp(prefix + "mlp.", w.config.intermediate_size);
    return l;
  }
};

int64_t linear_bytes(const linear_weight& lw) {
  if (lw.data == nullptr)
    return 0;
  return lw.num_bytes() + lw.scale_bytes();
}

}  // namespace

int64_t mlp_bytes(const mlp_weights& m) {
  return linear_bytes(m.gate_proj) + linear_bytes(m.up_proj) + linear_bytes(m.down_proj);
}

model_weights load_model_weights(std::shared_ptr<const checkpoint> ckpt) {
  model_weights w;
  w.config = ckpt->config();
  w.source = ckpt;
  loader load{*ckpt, w};
  if (w.config.quantization) {
    load.block_rows = w.config.quantization->block_rows;
    load.block_cols = w.config.quantization->block_cols;
  }
  const int64_t v = w.config.vocab_size, d = w.config.hidden_size;
  w.embed_tokens = load.linear("model.embed_tokens.weight", v, d);
  // Layers >= num_hidden_layers (the MTP module) are never looked up, hence ignored.
  w.layers.reserve(static_cast<size_t>(w.config.num_hidden_layers));
  for (int64_t layer_idx = 0; layer_idx < w.config.num_hidden_layers; ++layer_idx)
    w.layers.push_back(load.layer(layer_idx));
  w.norm = load.vector_f32("model.norm.weight", d, "a norm weight");
  if (!ckpt->contains("lm_head.weight") && w.config.tie_word_embeddings)
    w.lm_head = w.embed_tokens;
  else
    w.lm_head = load.linear("lm_head.weight", v, d);
  return w;
}

int64_t weight_bytes_per_token(const model_weights& w) {
  int64_t n = linear_bytes(w.lm_head);
  for (const layer_weights& l : w.layers) {
    const attention_weights& a = l.attn;
    n += linear_bytes(a.q_a_proj) + linear_bytes(a.q_b_proj) + linear_bytes(a.q_proj) +
         linear_bytes(a.kv_a_proj_with_mqa) + linear_bytes(a.kv_b_proj) + linear_bytes(a.o_proj);
    if (!l.is_moe) {
      n += mlp_bytes(l.mlp);
      continue;
    }
    n += linear_bytes(l.moe.gate) + mlp_bytes(l.moe.shared_experts);
    if (!l.moe.experts.empty())  // every routed expert has the same size
      n += w.config.num_experts_per_tok * mlp_bytes(l.moe.experts.front());
  }
  return n;
}

}  // namespace moe
