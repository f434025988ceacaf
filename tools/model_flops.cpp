// tools/model_flops.cpp
#include "tools/model_flops.hpp"

namespace moe::tools {

namespace {

// One token's multiply-adds in a layer: the q and kv projections (ATTN-0, run for every token,
// whose KV must be stored) and the rest (kv_b_proj's W_UK / W_UV, o_proj, the MLP).
struct layer_macs {
  double projections = 0.0;
  double tail = 0.0;
};

layer_macs macs_of_layer(const model_config& c, int64_t layer) {
  const double D = static_cast<double>(c.hidden_size), H = static_cast<double>(c.num_attention_heads);
  const double dn = static_cast<double>(c.qk_nope_head_dim), dr = static_cast<double>(c.qk_rope_head_dim);
  const double dv = static_cast<double>(c.v_head_dim), C = static_cast<double>(c.kv_lora_rank);
  layer_macs m;
  m.projections = D * (C + dr);  // kv_a_proj_with_mqa
  if (c.q_lora_rank) {
    const double cq = static_cast<double>(*c.q_lora_rank);
    m.projections += D * cq + cq * H * (dn + dr);  // q_a_proj, q_b_proj
  } else {
    m.projections += D * H * (dn + dr);  // q_proj
  }
  m.tail = H * dn * C + H * C * dv  // W_UK into q, W_UV out of the latent
           + H * dv * D;            // o_proj
  const double expert = 3.0 * D * static_cast<double>(c.moe_intermediate_size);  // gate, up, down
  if (c.is_moe_layer(layer))
    m.tail += D * static_cast<double>(c.n_routed_experts)  // router
              + static_cast<double>(c.n_shared_experts + c.num_experts_per_tok) * expert;
  else
    m.tail += 3.0 * D * static_cast<double>(c.intermediate_size);
  return m;
}

}  // namespace

double token_matmul_flops(const model_config& c) {
  double macs = 0.0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const layer_macs m = macs_of_layer(c, l);
    macs += m.projections + m.tail;
  }
  return 2.0 * macs;
}

double key_attention_flops(const model_config& c, attention_form form) {
  const auto per_head = static_cast<double>(form == attention_form::absorbed
                                              ? 2 * c.kv_lora_rank + c.qk_rope_head_dim
                                              : c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim);
  return 2.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads) * per_head;
}

double prefill_flops(const model_config& c, int64_t prompt_len, attention_forms forms) {
  const double n = static_cast<double>(prompt_len);
  const double keys = n * (n + 1.0) / 2.0;  // sum over positions p of p + 1
  const double lm_head = 2.0 * static_cast<double>(c.hidden_size) * static_cast<double>(c.vocab_size);
  // The last layer runs past its projections on the logit row only (forward_step's
  // keep_logit_rows), in the decode form: the other n - 1 tokens skip its tail, and its
  // attention is that row's over n keys.
  if (c.num_hidden_layers == 0 || prompt_len < 1)
    return lm_head;
  const auto L = static_cast<double>(c.num_hidden_layers);
  const double skipped_tail = (n - 1.0) * 2.0 * macs_of_layer(c, c.num_hidden_layers - 1).tail;
  const double attention = keys * key_attention_flops(c, forms.prefill) * (L - 1.0) / L +
                           n * key_attention_flops(c, forms.decode) / L;
  return n * token_matmul_flops(c) + attention + lm_head - skipped_tail;
}

}  // namespace moe::tools
