// kernels/model/weights.hpp
// The DeepSeek-V3 weights as views into the mmap-ed checkpoint (docs/reference/model-spec.md
// section 3). Linear weights keep their stored dtype; FP8 ones carry their 128x128 block scales.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/model_config.hpp"
#include "kernels/dtype.hpp"

namespace moe {

class checkpoint;

/// A PyTorch nn.Linear weight [out_features, in_features]: y = x @ W^T.
struct linear_weight {
  dtype type = dtype::bf16;    // f32, f16, bf16 or f8_e4m3
  const void* data = nullptr;  // [out_features, in_features] in `layout`
  weight_layout layout = weight_layout::row_major;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const float* scale_inv = nullptr;  // f8_e4m3 only: [ceil(out/block_rows), ceil(in/block_cols)]
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  /// BF16 only: the same weight already packed in the fast GEMM's panel layout
  /// (kernels/cpu/fast_weights.hpp pack_gemm_panels), owned by its model_weights; null: the
  /// GEMM packs per call.
  const uint16_t* gemm_panels = nullptr;

  /// Index of element W[o, i] in `data` (elements of `type`).
  [[nodiscard]] int64_t index(int64_t o, int64_t i) const noexcept {
    return layout == weight_layout::row_major ? o * in_features + i : fp8_panel_offset(o, i, in_features);
  }
  /// Dequantised element W[o, i] (FP8: value * scale_inv[o / block_rows, i / block_cols]).
  [[nodiscard]] float at(int64_t o, int64_t i) const noexcept {
    const float v = load_as_f32(type, data, index(o, i));
    if (scale_inv == nullptr)
      return v;
    const int64_t scale_cols = (in_features + block_cols - 1) / block_cols;
    return v * scale_inv[(o / block_rows) * scale_cols + i / block_cols];
  }
  [[nodiscard]] int64_t num_bytes() const noexcept { return out_features * in_features * dtype_size(type); }
  /// Bytes of the FP8 block scales (0 without them).
  [[nodiscard]] int64_t scale_bytes() const noexcept {
    if (scale_inv == nullptr)
      return 0;
    return 4 * ((out_features + block_rows - 1) / block_rows) * ((in_features + block_cols - 1) / block_cols);
  }
};

/// SwiGLU MLP: down( silu(gate x) * up x ). Dense layers, each routed expert, the shared experts.
struct mlp_weights {
  linear_weight gate_proj;  // [I, D]
  linear_weight up_proj;    // [I, D]
  linear_weight down_proj;  // [D, I]
};

/// Multi-head latent attention (model-spec 5.4).
struct attention_weights {
  linear_weight q_a_proj;             // [Cq, D]        (absent when q_lora_rank is null)
  std::vector<float> q_a_layernorm;   // [Cq]
  linear_weight q_b_proj;             // [H*dq, Cq]
  linear_weight q_proj;               // [H*dq, D]      (only when q_lora_rank is null)
  linear_weight kv_a_proj_with_mqa;   // [C+dr, D]
  std::vector<float> kv_a_layernorm;  // [C]
  linear_weight kv_b_proj;            // [H*(dn+dv), C]
  linear_weight o_proj;               // [D, H*dv]
};

/// Router and experts of one MoE layer (model-spec 5.7).
struct moe_weights {
  linear_weight gate;                          // [E, D], never FP8
  std::vector<float> e_score_correction_bias;  // [E]
  std::vector<mlp_weights> experts;            // E logical experts
  mlp_weights shared_experts;                  // width n_shared_experts * moe_intermediate_size
};

struct layer_weights {
  std::vector<float> input_layernorm;           // [D]
  std::vector<float> post_attention_layernorm;  // [D]
  attention_weights attn;
  bool is_moe = false;
  mlp_weights mlp;  // dense layers only
  moe_weights moe;  // MoE layers only
};

/// A loaded model: views into the checkpoint, which must outlive it (held by `source`).
struct model_weights {
  model_config config;
  linear_weight embed_tokens;  // [V, D]
  std::vector<layer_weights> layers;
  std::vector<float> norm;  // [D]
  linear_weight lm_head;    // [V, D]
  std::shared_ptr<const checkpoint> source;
  std::vector<std::vector<float>> owned;                 // scales converted to f32, realigned tensors
  std::vector<std::shared_ptr<const void>> fast_copies;  // the fast path's layouts (fast_weights.hpp)
  std::vector<std::shared_ptr<const void>> requantized;  // weights quantised at load (fp8_quantize.hpp)
};

/// Loads every tensor the forward pass needs, checking names, dtypes and shapes. MTP layers
/// (model.layers.<num_hidden_layers>.*) are ignored. Throws input_error naming file and tensor.
[[nodiscard]] model_weights load_model_weights(std::shared_ptr<const checkpoint> ckpt);

/// Bytes of an MLP's weights and FP8 block scales (a routed expert's: what moving it copies).
[[nodiscard]] int64_t mlp_bytes(const mlp_weights& m);

/// Bytes of weights read to decode one token at batch 1 (attention, dense, shared, top-k routed
/// experts, router, lm_head; the embedding row is negligible).
[[nodiscard]] int64_t weight_bytes_per_token(const model_weights& w);

}  // namespace moe
