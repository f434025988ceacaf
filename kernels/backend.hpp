// kernels/backend.hpp
// The one interface every device implements, op for op: the CPU reference (kernels/cpu/), the
// fast CPU path beside it, and CUDA (kernels/cuda/). Activations are fp32 [num_tokens, ...]
// row-major host buffers; weights are linear_weight views in their stored dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/model/weights.hpp"

namespace moe {

enum class op_kind : uint8_t {
  embedding,
  rms_norm,
  linear,
  rope,
  store_kv,
  mla_attention,
  silu_mul,
  add,
  moe_gate,
  moe_experts
};

/// out[t] = table[ids[t]] as fp32.                     table: [V, D] -> out: [num_tokens, D]
struct embedding_params {
  const linear_weight* table = nullptr;
  const int32_t* ids = nullptr;
  float* out = nullptr;
  int64_t num_tokens = 0;
};

/// y = x / sqrt(mean(x^2) + eps) * weight, per row.    x, out: rows of `dim` values, `stride` apart
struct rms_norm_params {
  const float* x = nullptr;
  const float* weight = nullptr;  // [dim]
  float* out = nullptr;           // may equal x
  int64_t num_tokens = 0;
  int64_t dim = 0;
  int64_t stride = 0;  // elements between rows (0 -> dim)
  float eps = 1e-6f;
};

/// out = x @ w^T.                                      x: [num_tokens, in] -> out: [num_tokens, out]
struct linear_params {
  const float* x = nullptr;
  const linear_weight* w = nullptr;
  float* out = nullptr;
  int64_t num_tokens = 0;
};

/// out[i] = x @ w[i]^T for weights that read the same x (q_a_proj and kv_a_proj_with_mqa; an MLP's
/// gate_proj and up_proj), so a backend can stream them in one pass.
///                                          x: [num_tokens, in] -> out[i]: [num_tokens, w[i]->out]
struct linear_group_params {
  const float* x = nullptr;
  std::span<const linear_weight* const> w;
  std::span<float* const> out;  // one per weight
  int64_t num_tokens = 0;
};

/// Interleaved-pair RoPE in place (model-spec 5.3): pair (2i, 2i+1) turns by pos * inv_freq[i],
/// cos and sin scaled by attention_factor. Rotates `num_heads` vectors of `rope_dim` per token:
/// vector h of token t starts at x + t * token_stride + h * head_stride.
struct rope_params {
  float* x = nullptr;
  int64_t num_tokens = 0;
  int64_t num_heads = 1;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  int64_t rope_dim = 0;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [rope_dim / 2]
  float attention_factor = 1.0f;
};

/// Where one layer's latent KV lives: blocks of `block_size` tokens x `kv_dim` values
/// ([c_kv (kv_lora_rank) | k_rope (rope_dim)]), addressed through per-sequence block tables.
struct kv_layer_view {
  float* base = nullptr;  // [num_blocks, block_size, kv_dim] for this layer
  int64_t block_size = 0;
  int64_t kv_dim = 0;

  [[nodiscard]] float* slot(const int32_t* block_table, int64_t pos) const noexcept {
    return base +
           (static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size) * kv_dim;
  }
};

/// Which sequence and position each token of a flattened batch belongs to.
struct token_layout {
  const int32_t* seq_idx = nullptr;              // [num_tokens]
  const int32_t* positions = nullptr;            // [num_tokens] absolute positions
  const int32_t* const* block_tables = nullptr;  // [num_seqs] -> block ids
};

/// Writes rows kv [num_tokens, kv_dim] (latent normalised, k_rope rotated) into the cache.
struct store_kv_params {
  const float* kv = nullptr;
  int64_t kv_stride = 0;  // elements between rows of kv
  int64_t num_tokens = 0;
  kv_layer_view cache;
  token_layout layout;
};

/// The same math in two orders. DeepSeek serves V3 with the naive form (MHA) for prefill and the
/// absorbed form (MQA over the latents) for decode: a key costs a query head 2 (dn + dr + dv)
/// FLOPs naive against 2 (2C + dr) absorbed (320 against 576 on the small preset, 640 against
/// 2176 on V3), and expanding a key's k_nope and v, 2 C H (dn + dv), is paid once per key rather
/// than once per query row: cheaper when a call brings many queries (a prompt), dearer for one.
enum class attention_form : uint8_t {
  naive,     // expand cached latents to per-head k_nope and v with kv_b_proj (model-spec 5.4)
  absorbed,  // absorb W_UK into q and W_UV after the weighted sum (model-spec 5.5)
};

/// Causal MLA over the paged cache: token t attends to positions 0..positions[t] of its sequence.
/// q: [num_tokens, num_heads, nope_dim + rope_dim] (rope applied) -> out: [num_tokens, num_heads*v_dim]
struct mla_attention_params {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t nope_dim = 0;
  int64_t rope_dim = 0;
  int64_t v_dim = 0;
  int64_t kv_lora_rank = 0;
  const linear_weight* kv_b_proj = nullptr;  // [num_heads * (nope_dim + v_dim), kv_lora_rank]
  float softmax_scale = 1.0f;
  attention_form form = attention_form::absorbed;
  const attention_form* seq_form = nullptr;  // [num_seqs] each sequence's form; null: `form` for all
  kv_layer_view cache;
  token_layout layout;
};

/// out[t, i] = silu(gate[t, i]) * up[t, i], silu(z) = z / (1 + exp(-z)).
/// gate, up: [num_tokens, dim] -> out: [num_tokens, dim] (may equal gate)
struct silu_mul_params {
  const float* gate = nullptr;
  const float* up = nullptr;
  float* out = nullptr;
  int64_t num_tokens = 0;
  int64_t dim = 0;
};

/// out[i] += x[i] for i < n (residual adds).
struct add_params {
  float* out = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
};

/// The noaux_tc router (model-spec 5.7): sigmoid scores, bias for selection only, group-limited
/// top-k (top-2 sum per group, keep topk_group groups, mask -inf), weights from unbiased scores,
/// normalised, times routed_scaling_factor. Ties choose the lower index.
/// logits: [num_tokens, num_experts] -> topk_ids, topk_weights: [num_tokens, top_k]
struct moe_gate_params {
  const float* logits = nullptr;
  const float* bias = nullptr;  // [num_experts] e_score_correction_bias (may be null)
  int32_t* topk_ids = nullptr;
  float* topk_weights = nullptr;
  int64_t num_tokens = 0;
  int64_t num_experts = 0;
  int64_t num_groups = 1;
  int64_t topk_group = 1;
  int64_t top_k = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

/// out[t] = sum_k topk_weights[t, k] * expert[topk_ids[t, k]](x[t]), summing k in order 0..K-1
/// (a fixed order, whatever the grouping). Experts outside [expert_begin, expert_end) are skipped.
/// x: [num_tokens, hidden] -> out: [num_tokens, hidden] (overwritten)
struct moe_experts_params {
  const float* x = nullptr;
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  float* out = nullptr;
  int64_t num_tokens = 0;
  int64_t hidden = 0;
  int64_t top_k = 0;
  const std::vector<mlp_weights>* experts = nullptr;
  int64_t expert_begin = 0;
  int64_t expert_end = 0;
  bool round_outputs_bf16 = false;  // round each w[t,k] * y to BF16 before the sum, as a
                                    // BF16 combine payload does
};

/// One device. Each op is one virtual; callers hold a backend& chosen once at start-up.
class backend {
 public:
  virtual ~backend() = default;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;  // "cpu-ref", "cpu", "cuda:0"
  [[nodiscard]] virtual bool supports(op_kind op) const noexcept = 0;
  virtual void embedding(const embedding_params& p) = 0;
  virtual void rms_norm(const rms_norm_params& p) = 0;
  virtual void linear(const linear_params& p) = 0;
  /// One linear per weight unless a backend fuses them. Throws std::invalid_argument when the
  /// weights and outputs differ in number or the weights in their input width.
  virtual void linear_group(const linear_group_params& p) {
    check_linear_group(p);
    for (size_t i = 0; i < p.w.size(); ++i)
      linear({.x = p.x, .w = p.w[i], .out = p.out[i], .num_tokens = p.num_tokens});
  }
  virtual void rope(const rope_params& p) = 0;
  virtual void store_kv(const store_kv_params& p) = 0;
  virtual void mla_attention(const mla_attention_params& p) = 0;
  virtual void silu_mul(const silu_mul_params& p) = 0;
  virtual void add(const add_params& p) = 0;
  virtual void moe_gate(const moe_gate_params& p) = 0;
  virtual void moe_experts(const moe_experts_params& p) = 0;

 protected:
  static void check_linear_group(const linear_group_params& p) {
    if (p.w.size() != p.out.size())
      throw std::invalid_argument("linear_group: " + std::to_string(p.w.size()) + " weights but " +
                                  std::to_string(p.out.size()) + " outputs");
    for (const linear_weight* w : p.w)
      if (w->in_features != p.w.front()->in_features)
        throw std::invalid_argument("linear_group: weights of " + std::to_string(p.w.front()->in_features) +
                                    " and " + std::to_string(w->in_features) + " inputs read one x");
  }
};

/// The CPU reference: plain loops, fp32 activations and accumulation. The specification.
[[nodiscard]] std::unique_ptr<backend> make_cpu_reference_backend();
/// The fast CPU path: AVX-512 BF16 GEMV/GEMM kernels, BF16 or FP8 weights, all cores. Only on
/// CPUs where cpu_fast_path_supported(). With `cpus`, its pool's workers pin themselves there
/// (worker i to cpus[i % size]; cpus[0] is the calling thread's, pinned by its owner).
[[nodiscard]] std::unique_ptr<backend> make_cpu_fast_backend(int num_threads = 0, std::vector<int> cpus = {});
/// Whether this CPU has what the fast path needs (AVX-512 F/BW/VL/DQ and AVX512_BF16).
[[nodiscard]] bool cpu_fast_path_supported() noexcept;
/// The fast path where supported, else the reference (with a warning on stderr); the
/// reference when asked (`cpus` as make_cpu_fast_backend's; the reference has no threads).
[[nodiscard]] std::unique_ptr<backend> make_cpu_backend(bool reference, int num_threads = 0,
                                                        std::vector<int> cpus = {});
/// Backends that can run here: the CPU reference always, CUDA devices when present.
[[nodiscard]] std::vector<std::unique_ptr<backend>> available_backends();

}  // namespace moe
