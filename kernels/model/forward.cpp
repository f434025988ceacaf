// kernels/model/forward.cpp
// The DeepSeek-V3 forward pass (model-spec 5.1): embedding, then per layer pre-norm MLA and a
// dense or MoE MLP with residual adds, then the final norm and lm_head on the selected rows.
#include "kernels/model/forward.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {

namespace {

// The flattened batch: which sequence and position each token has.
struct flat_batch {
  std::vector<int32_t> token_ids, seq_idx, positions;
  std::vector<const int32_t*> block_tables;
  std::vector<int64_t> logit_rows;          // token indices whose logits are returned

  [[nodiscard]] token_layout layout() const {
    return {.seq_idx = seq_idx.data(), .positions = positions.data(),
            .block_tables = block_tables.data()};
  }
  [[nodiscard]] int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

flat_batch flatten(std::span<const batch_entry> batch, const model_config& cfg,
                   const kv_cache& cache) {
  flat_batch flat;
  for (size_t s = 0; s < batch.size(); ++s) {
    const batch_entry& entry = batch[s];
    const int64_t start = entry.kv->num_cached, n = static_cast<int64_t>(entry.tokens.size());
    if (n == 0)
      throw std::invalid_argument("forward: a batch entry has no tokens");
    if (static_cast<int64_t>(entry.kv->block_table.size()) * cache.block_size() < start + n)
      throw std::logic_error("forward: sequence KV not reserved for its new tokens");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = entry.tokens[i];
      if (id < 0 || id >= cfg.vocab_size)
        throw input_error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(cfg.vocab_size) + ")");
      if (entry.all_logits || i == n - 1)
        flat.logit_rows.push_back(flat.num_tokens());
      flat.token_ids.push_back(id);
      flat.seq_idx.push_back(static_cast<int32_t>(s));
      flat.positions.push_back(static_cast<int32_t>(start + i));
    }
    flat.block_tables.push_back(entry.kv->block_table.data());
  }
  return flat;
}

// out = down( silu(gate x) * up x ).   x: [T, D] -> out: [T, D]
void run_mlp(backend& b, const mlp_weights& w, const float* x, float* out, int64_t num_tokens) {
  const int64_t inter = w.gate_proj.out_features;
  std::vector<float> gate(static_cast<size_t>(num_tokens * inter)), up(gate.size());
  b.linear({.x = x, .w = &w.gate_proj, .out = gate.data(), .num_tokens = num_tokens});
  b.linear({.x = x, .w = &w.up_proj, .out = up.data(), .num_tokens = num_tokens});
  b.silu_mul({.gate = gate.data(), .up = up.data(), .out = gate.data(), .num_tokens = num_tokens,
              .dim = inter});
  b.linear({.x = gate.data(), .w = &w.down_proj, .out = out, .num_tokens = num_tokens});
}

// out = sum_k w_k Expert_k(x) + SharedExperts(x) with the noaux_tc router.  x: [T, D] -> out: [T, D]
void run_moe(backend& b, const model_config& cfg, const moe_weights& mw, const float* x,
             float* out, int64_t num_tokens) {
  const int64_t T = num_tokens, D = cfg.hidden_size, E = cfg.n_routed_experts;
  const int64_t K = cfg.num_experts_per_tok;
  std::vector<float> router_logits(static_cast<size_t>(T * E)), topk_weights(T * K);
  std::vector<int32_t> topk_ids(static_cast<size_t>(T * K));
  b.linear({.x = x, .w = &mw.gate, .out = router_logits.data(), .num_tokens = T});
  b.moe_gate({.logits = router_logits.data(), .bias = mw.e_score_correction_bias.data(),
              .topk_ids = topk_ids.data(), .topk_weights = topk_weights.data(), .num_tokens = T,
              .num_experts = E, .num_groups = cfg.n_group, .topk_group = cfg.topk_group,
              .top_k = K, .norm_topk_prob = cfg.norm_topk_prob,
              .routed_scaling_factor = static_cast<float>(cfg.routed_scaling_factor)});
  b.moe_experts({.x = x, .topk_ids = topk_ids.data(), .topk_weights = topk_weights.data(),
                 .out = out, .num_tokens = T, .hidden = D, .top_k = K, .experts = &mw.experts,
                 .expert_begin = 0, .expert_end = E});
  if (cfg.n_shared_experts > 0) {
    std::vector<float> shared(static_cast<size_t>(T * D));
    run_mlp(b, mw.shared_experts, x, shared.data(), T);
    b.add({.out = out, .x = shared.data(), .n = T * D});
  }
}

}  // namespace

model_runner::model_runner(const model_weights& weights, backend& device, kv_cache& cache,
                           forward_options options)
    : w_(weights), b_(device), cache_(cache), options_(options),
      rope_(make_rope_tables(weights.config)) {}

std::vector<float> model_runner::forward(std::span<const batch_entry> batch) {
  const model_config& cfg = w_.config;
  const flat_batch flat = flatten(batch, cfg, cache_);
  const int64_t T = flat.num_tokens(), D = cfg.hidden_size, H = cfg.num_attention_heads;
  const int64_t dn = cfg.qk_nope_head_dim, dr = cfg.qk_rope_head_dim, dq = dn + dr;
  const int64_t dv = cfg.v_head_dim, C = cfg.kv_lora_rank, kv_dim = C + dr;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  const token_layout layout = flat.layout();

  std::vector<float> h(static_cast<size_t>(T * D)), x(h.size()), y(h.size());   // [T, D]
  std::vector<float> q(static_cast<size_t>(T * H * dq)), kv(static_cast<size_t>(T * kv_dim));
  std::vector<float> attn(static_cast<size_t>(T * H * dv));
  b_.embedding({.table = &w_.embed_tokens, .ids = flat.token_ids.data(), .out = h.data(),
                .num_tokens = T});

  for (int64_t layer_idx = 0; layer_idx < cfg.num_hidden_layers; ++layer_idx) {
    const layer_weights& lw = w_.layers[layer_idx];
    const attention_weights& aw = lw.attn;
    // -- attention: h += o_proj( MLA( RMSNorm(h) ) )
    b_.rms_norm({.x = h.data(), .weight = lw.input_layernorm.data(), .out = x.data(),
                 .num_tokens = T, .dim = D, .eps = eps});
    if (cfg.q_lora_rank) {
      std::vector<float> cq(static_cast<size_t>(T * *cfg.q_lora_rank));           // [T, Cq]
      b_.linear({.x = x.data(), .w = &aw.q_a_proj, .out = cq.data(), .num_tokens = T});
      b_.rms_norm({.x = cq.data(), .weight = aw.q_a_layernorm.data(), .out = cq.data(),
                   .num_tokens = T, .dim = *cfg.q_lora_rank, .eps = eps});
      b_.linear({.x = cq.data(), .w = &aw.q_b_proj, .out = q.data(), .num_tokens = T});
    } else {
      b_.linear({.x = x.data(), .w = &aw.q_proj, .out = q.data(), .num_tokens = T});
    }
    b_.rope({.x = q.data() + dn, .num_tokens = T, .num_heads = H, .token_stride = H * dq,
             .head_stride = dq, .rope_dim = dr, .positions = flat.positions.data(),
             .inv_freq = rope_.inv_freq.data(), .attention_factor = rope_.attention_factor});
    b_.linear({.x = x.data(), .w = &aw.kv_a_proj_with_mqa, .out = kv.data(), .num_tokens = T});
    b_.rms_norm({.x = kv.data(), .weight = aw.kv_a_layernorm.data(), .out = kv.data(),
                 .num_tokens = T, .dim = C, .stride = kv_dim, .eps = eps});     // latent only
    b_.rope({.x = kv.data() + C, .num_tokens = T, .num_heads = 1, .token_stride = kv_dim,
             .head_stride = 0, .rope_dim = dr, .positions = flat.positions.data(),
             .inv_freq = rope_.inv_freq.data(), .attention_factor = rope_.attention_factor});
    const kv_layer_view cache = cache_.layer(layer_idx);
    b_.store_kv({.kv = kv.data(), .kv_stride = kv_dim, .num_tokens = T, .cache = cache,
                 .layout = layout});
    b_.mla_attention({.q = q.data(), .out = attn.data(), .num_tokens = T, .num_heads = H,
                      .nope_dim = dn, .rope_dim = dr, .v_dim = dv, .kv_lora_rank = C,
                      .kv_b_proj = &aw.kv_b_proj, .softmax_scale = rope_.softmax_scale,
                      .form = options_.form, .cache = cache, .layout = layout});
    b_.linear({.x = attn.data(), .w = &aw.o_proj, .out = y.data(), .num_tokens = T});
    b_.add({.out = h.data(), .x = y.data(), .n = T * D});

    // -- MLP: h += MLP( RMSNorm(h) ), dense, or routed + shared experts
    b_.rms_norm({.x = h.data(), .weight = lw.post_attention_layernorm.data(), .out = x.data(),
                 .num_tokens = T, .dim = D, .eps = eps});
    if (lw.is_moe)
      run_moe(b_, cfg, lw.moe, x.data(), y.data(), T);
    else
      run_mlp(b_, lw.mlp, x.data(), y.data(), T);
    b_.add({.out = h.data(), .x = y.data(), .n = T * D});
    if (options_.observe_layer)
      options_.observe_layer(layer_idx, h);
  }

  // -- logits for the selected rows: RMSNorm(h) @ lm_head^T
  const int64_t R = static_cast<int64_t>(flat.logit_rows.size()), V = cfg.vocab_size;
  std::vector<float> rows(static_cast<size_t>(R * D)), logits(static_cast<size_t>(R * V));
  for (int64_t r = 0; r < R; ++r)
    std::copy_n(h.data() + flat.logit_rows[r] * D, D, rows.data() + r * D);
  b_.rms_norm({.x = rows.data(), .weight = w_.norm.data(), .out = rows.data(), .num_tokens = R,
               .dim = D, .eps = eps});
  b_.linear({.x = rows.data(), .w = &w_.lm_head, .out = logits.data(), .num_tokens = R});
  for (const batch_entry& entry : batch)
    entry.kv->num_cached += static_cast<int64_t>(entry.tokens.size());
  return logits;
}

}  // namespace moe
