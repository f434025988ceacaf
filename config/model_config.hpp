// config/model_config.hpp
// The model's hyper-parameters, read from a Hugging Face `config.json` with the HF key names
// as-is, and validated once at the boundary (see docs/reference/model-spec.md §2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe {

/// Raised for bad input at a boundary (config, checkpoint, tokenizer, CLI). The message names the
/// file and the field or tensor and says what was expected.
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `rope_scaling` (or `rope_parameters`) block; only "yarn" changes anything.
struct rope_scaling_config {
  std::string type;  // "yarn"
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;          // missing -> 1
  double mscale_all_dim = 0.0;  // missing -> 0
};

/// `quantization_config` of FP8 checkpoints.
struct quantization_config {
  std::string quant_method;  // "fp8"
  std::string fmt;           // "e4m3"
  int64_t block_rows = 128;  // weight_block_size[0]
  int64_t block_cols = 128;  // weight_block_size[1]
};

/// DeepSeek-V3 hyper-parameters under their HF names.
struct model_config {
  std::string model_type;  // "deepseek_v3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense-layer FFN width
  int64_t moe_intermediate_size = 0;  // per routed expert
  int64_t num_hidden_layers = 0;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  int64_t num_attention_heads = 0;
  std::optional<int64_t> q_lora_rank;  // null -> single q_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  std::optional<rope_scaling_config> rope_scaling;
  bool rope_interleave = true;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  int64_t num_nextn_predict_layers = 0;
  std::string torch_dtype = "bfloat16";
  std::optional<quantization_config> quantization;

  [[nodiscard]] bool is_moe_layer(int64_t layer_idx) const noexcept {
    return n_routed_experts > 0 && layer_idx >= first_k_dense_replace && layer_idx % moe_layer_freq == 0;
  }
  [[nodiscard]] int64_t num_moe_layers() const noexcept {
    int64_t n = 0;
    for (int64_t l = 0; l < num_hidden_layers; ++l)
      n += is_moe_layer(l) ? 1 : 0;
    return n;
  }
  [[nodiscard]] int64_t qk_head_dim() const noexcept { return qk_nope_head_dim + qk_rope_head_dim; }
  /// Latent KV values cached per token per layer: kv_lora_rank + qk_rope_head_dim.
  [[nodiscard]] int64_t kv_cache_dim() const noexcept { return kv_lora_rank + qk_rope_head_dim; }
  [[nodiscard]] int64_t shared_intermediate_size() const noexcept {
    return n_shared_experts * moe_intermediate_size;
  }
};

/// Parses a config.json text. `origin` names the file in error messages. Throws input_error on
/// malformed JSON, a missing or mistyped field, or a config that fails validate().
[[nodiscard]] model_config parse_model_config(std::string_view json_text, std::string_view origin);

/// Reads and parses `<dir>/config.json`.
[[nodiscard]] model_config load_model_config(const std::filesystem::path& dir);

/// Checks the invariants the forward pass relies on; throws input_error naming the field.
void validate(const model_config& cfg, std::string_view origin);

/// Serialises to config.json text with HF key names (used by make-model).
[[nodiscard]] std::string to_json(const model_config& cfg);

}  // namespace moe
