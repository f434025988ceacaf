// tools/model_flops.cpp
#include "tools/model_flops.hpp"

namespace moe::tools {

double token_matmul_flops(const model_config& c) {
  const double D = static_cast<double>(c.hidden_size), H = static_cast<double>(c.num_attention_heads);
  const double dn = static_cast<double>(c.qk_nope_head_dim), dr = static_cast<double>(c.qk_rope_head_dim);
  const double dv = static_cast<double>(c.v_head_dim), C = static_cast<double>(c.kv_lora_rank);
  double attention = D * (C + dr)                        // kv_a_proj_with_mqa
                     + H * dn * C + H * C * dv           // W_UK into q, W_UV out of the latent
                     + H * dv * D;                       // o_proj
  if (c.q_lora_rank) {
    const double cq = static_cast<double>(*c.q_lora_rank);
    attention += D * cq + cq * H * (dn + dr);            // q_a_proj, q_b_proj
  } else {
    attention += D * H * (dn + dr);                      // q_proj
  }
  const double expert = 3.0 * D * static_cast<double>(c.moe_intermediate_size);   // gate, up, down
  const double moe = D * static_cast<double>(c.n_routed_experts)                    // router
                     + static_cast<double>(c.n_shared_experts + c.num_experts_per_tok) * expert;
  const double dense = 3.0 * D * static_cast<double>(c.intermediate_size);
  double macs = 0.0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    macs += attention + (c.is_moe_layer(l) ? moe : dense);
  return 2.0 * macs;
}

double key_attention_flops(const model_config& c) {
  const double per_head = 2.0 * static_cast<double>(c.kv_lora_rank) + static_cast<double>(c.qk_rope_head_dim);
  return 2.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads) * per_head;
}

double prefill_flops(const model_config& c, int64_t prompt_len) {
  const double n = static_cast<double>(prompt_len);
  const double keys = n * (n + 1.0) / 2.0;               // sum over positions p of p + 1
  const double lm_head = 2.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.vocab_size);
  return n * token_matmul_flops(c) + keys * key_attention_flops(c) + lm_head;
}

}  // namespace moe::tools
