// kernels/model/forward_step.cpp
// The DeepSeek-V3 forward pass (model-spec 5.1) as stages: embedding; per layer pre-norm MLA
// and a dense or MoE MLP with residual adds; final norm and lm_head on the selected rows.
#include "kernels/model/forward_step.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {

namespace {

// out = down( silu(gate x) * up x ).   x: [T, D] -> out: [T, D]
void run_mlp(backend& b, const mlp_weights& w, const float* x, float* out, int64_t num_tokens) {
  const int64_t inter = w.gate_proj.out_features;
  std::vector<float> gate(static_cast<size_t>(num_tokens * inter)), up(gate.size());
  const linear_weight* ws[] = {&w.gate_proj, &w.up_proj};
  float* outs[] = {gate.data(), up.data()};
  b.linear_group({.x = x, .w = ws, .out = outs, .num_tokens = num_tokens});
  b.silu_mul(
    {.gate = gate.data(), .up = up.data(), .out = gate.data(), .num_tokens = num_tokens, .dim = inter});
  b.linear({.x = gate.data(), .w = &w.down_proj, .out = out, .num_tokens = num_tokens});
}

}  // namespace

forward_step::forward_step(const model_weights& weights, backend& device, kv_cache& cache,
                           const rope_tables& rope, std::span<const batch_entry> batch)
    : w_(weights), b_(device), cache_(cache), rope_(rope), batch_(batch) {
  const model_config& cfg = w_.config;
  for (size_t s = 0; s < batch.size(); ++s) {
    const batch_entry& entry = batch[s];
    const int64_t start = entry.start >= 0 ? entry.start : entry.kv->num_cached;
    const int64_t n = static_cast<int64_t>(entry.tokens.size());
    if (n == 0)
      throw std::invalid_argument("forward: a batch entry has no tokens");
    if (static_cast<int64_t>(entry.kv->block_table.size()) * cache.block_size() < start + n)
      throw std::logic_error("forward: sequence KV not reserved for its new tokens");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = entry.tokens[i];
      if (id < 0 || id >= cfg.vocab_size)
        throw input_error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                          std::to_string(cfg.vocab_size) + ")");
      if (!entry.no_logits && (entry.all_logits || i == n - 1))
        logit_rows_.push_back(num_tokens());
      token_ids_.push_back(id);
      seq_idx_.push_back(static_cast<int32_t>(s));
      positions_.push_back(static_cast<int32_t>(start + i));
    }
    block_tables_.push_back(entry.kv->block_table.data());
    ends_.push_back(start + n);
  }
  const int64_t T = num_tokens(), D = cfg.hidden_size, H = cfg.num_attention_heads;
  h_.resize(static_cast<size_t>(T * D));
  x_.resize(h_.size());
  shared_.resize(h_.size());
  routed_.resize(h_.size());
  q_.resize(static_cast<size_t>(T * H * cfg.qk_head_dim()));
  kv_.resize(static_cast<size_t>(T * cfg.kv_cache_dim()));
  attn_.resize(static_cast<size_t>(T * H * cfg.v_head_dim));
  if (T > 0)
    b_.embedding({.table = &w_.embed_tokens, .ids = token_ids_.data(), .out = h_.data(), .num_tokens = T});
}

token_layout forward_step::layout() const noexcept {
  return {.seq_idx = seq_idx_.data(), .positions = positions_.data(), .block_tables = block_tables_.data()};
}

void forward_step::attn_0(int64_t layer_idx) {
  if (num_tokens() == 0)  // an idle rank's empty micro-batch
    return;
  const model_config& cfg = w_.config;
  const layer_weights& lw = w_.layers[layer_idx];
  const attention_weights& aw = lw.attn;
  const int64_t T = num_tokens(), D = cfg.hidden_size, H = cfg.num_attention_heads;
  const int64_t dn = cfg.qk_nope_head_dim, dr = cfg.qk_rope_head_dim, dq = dn + dr;
  const int64_t C = cfg.kv_lora_rank, kv_dim = C + dr;
  const float eps = static_cast<float>(cfg.rms_norm_eps);
  b_.rms_norm({.x = h_.data(),
               .weight = lw.input_layernorm.data(),
               .out = x_.data(),
               .num_tokens = T,
               .dim = D,
               .eps = eps});
  // both projections of x in one pass: q_a (or q) and kv_a
  std::vector<float> cq(static_cast<size_t>(T * cfg.q_lora_rank.value_or(0)));  // [T, Cq]
  const linear_weight* ws[] = {cfg.q_lora_rank ? &aw.q_a_proj : &aw.q_proj, &aw.kv_a_proj_with_mqa};
  float* outs[] = {cfg.q_lora_rank ? cq.data() : q_.data(), kv_.data()};
  b_.linear_group({.x = x_.data(), .w = ws, .out = outs, .num_tokens = T});
  if (cfg.q_lora_rank) {  // q = q_b( RMSNorm( q_a x ) )
    b_.rms_norm({.x = cq.data(),
                 .weight = aw.q_a_layernorm.data(),
                 .out = cq.data(),
                 .num_tokens = T,
                 .dim = *cfg.q_lora_rank,
                 .eps = eps});
    b_.linear({.x = cq.data(), .w = &aw.q_b_proj, .out = q_.data(), .num_tokens = T});
  }
  b_.rope({.x = q_.data() + dn,
           .num_tokens = T,
           .num_heads = H,
           .token_stride = H * dq,
           .head_stride = dq,
           .rope_dim = dr,
           .positions = positions_.data(),
           .inv_freq = rope_.inv_freq.data(),
           .attention_factor = rope_.attention_factor});
  b_.rms_norm({.x = kv_.data(),
               .weight = aw.kv_a_layernorm.data(),
               .out = kv_.data(),
               .num_tokens = T,
               .dim = C,
               .stride = kv_dim,
               .eps = eps});  // latent only
  b_.rope({.x = kv_.data() + C,
           .num_tokens = T,
           .num_heads = 1,
           .token_stride = kv_dim,
           .head_stride = 0,
           .rope_dim = dr,
           .positions = positions_.data(),
           .inv_freq = rope_.inv_freq.data(),
           .attention_factor = rope_.attention_factor});
  b_.store_kv({.kv = kv_.data(),
               .kv_stride = kv_dim,
               .num_tokens = T,
               .cache = cache_.layer(layer_idx),
               .layout = layout()});
}

void forward_step::keep_logit_rows() {
  const int64_t R = static_cast<int64_t>(logit_rows_.size());
  const model_config& cfg = w_.config;
  const int64_t D = cfg.hidden_size, Q = cfg.num_attention_heads * cfg.qk_head_dim();
  // rows only move down (logit rows ascend), so in place
  auto keep = [&](auto& v, int64_t width) {
    for (int64_t r = 0; r < R; ++r)
      std::copy_n(v.begin() + logit_rows_[r] * width, width, v.begin() + r * width);
    v.resize(static_cast<size_t>(R * width));
  };
  keep(token_ids_, 1);
  keep(seq_idx_, 1);
  keep(positions_, 1);
  keep(h_, D);
  keep(q_, Q);
  for (auto* v : {&x_, &shared_, &routed_})
    v->resize(static_cast<size_t>(R * D));
  attn_.resize(static_cast<size_t>(R * cfg.num_attention_heads * cfg.v_head_dim));
  for (int64_t r = 0; r < R; ++r)
    logit_rows_[r] = r;
}

void forward_step::attn_1(int64_t layer_idx, attention_forms forms) {
  const bool last = layer_idx == w_.config.num_hidden_layers - 1;
  if (last && static_cast<int64_t>(logit_rows_.size()) < num_tokens())
    keep_logit_rows();
  if (num_tokens() == 0)
    return;
  seq_form_.resize(batch_.size());
  for (size_t s = 0; s < batch_.size(); ++s)
    seq_form_[s] = batch_[s].decode || last ? forms.decode : forms.prefill;
  const model_config& cfg = w_.config;
  const layer_weights& lw = w_.layers[layer_idx];
  const int64_t T = num_tokens(), D = cfg.hidden_size;
  b_.mla_attention({.q = q_.data(),
                    .out = attn_.data(),
                    .num_tokens = T,
                    .num_heads = cfg.num_attention_heads,
                    .nope_dim = cfg.qk_nope_head_dim,
                    .rope_dim = cfg.qk_rope_head_dim,
                    .v_dim = cfg.v_head_dim,
                    .kv_lora_rank = cfg.kv_lora_rank,
                    .kv_b_proj = &lw.attn.kv_b_proj,
                    .softmax_scale = rope_.softmax_scale,
                    .form = forms.decode,
                    .seq_form = seq_form_.data(),
                    .cache = cache_.layer(layer_idx),
                    .layout = layout()});
  b_.linear({.x = attn_.data(), .w = &lw.attn.o_proj, .out = shared_.data(), .num_tokens = T});
  b_.add({.out = h_.data(), .x = shared_.data(), .n = T * D});
  b_.rms_norm({.x = h_.data(),
               .weight = lw.post_attention_layernorm.data(),
               .out = x_.data(),
               .num_tokens = T,
               .dim = D,
               .eps = static_cast<float>(cfg.rms_norm_eps)});
  if (!lw.is_moe)
    return;
  const int64_t E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
  router_logits_.resize(static_cast<size_t>(T * E));
  topk_ids_.resize(static_cast<size_t>(T * K));
  topk_weights_.resize(static_cast<size_t>(T * K));
  b_.linear({.x = x_.data(), .w = &lw.moe.gate, .out = router_logits_.data(), .num_tokens = T});
  b_.moe_gate({.logits = router_logits_.data(),
               .bias = lw.moe.e_score_correction_bias.data(),
               .topk_ids = topk_ids_.data(),
               .topk_weights = topk_weights_.data(),
               .num_tokens = T,
               .num_experts = E,
               .num_groups = cfg.n_group,
               .topk_group = cfg.topk_group,
               .top_k = K,
               .norm_topk_prob = cfg.norm_topk_prob,
               .routed_scaling_factor = static_cast<float>(cfg.routed_scaling_factor)});
}

void forward_step::shared(int64_t layer_idx) {
  if (num_tokens() == 0)
    return;
  const layer_weights& lw = w_.layers[layer_idx];
  const int64_t T = num_tokens();
  if (!lw.is_moe)
    run_mlp(b_, lw.mlp, x_.data(), shared_.data(), T);
  else if (w_.config.n_shared_experts > 0)
    run_mlp(b_, lw.moe.shared_experts, x_.data(), shared_.data(), T);
  else
    std::fill(shared_.begin(), shared_.end(), 0.0f);
}

void forward_step::routed_local(int64_t layer_idx, ep_precision ep) {
  if (num_tokens() == 0)
    return;
  const moe_weights& mw = w_.layers[layer_idx].moe;
  const int64_t T = num_tokens(), D = w_.config.hidden_size;
  std::vector<float> dispatched;  // x as the experts' ranks would see it
  const float* x = x_.data();
  if (ep.dispatch != payload_dtype::fp32) {
    dispatched = x_;
    round_trip_rows(dispatched.data(), T, D, ep.dispatch);
    x = dispatched.data();
  }
  b_.moe_experts({.x = x,
                  .topk_ids = topk_ids_.data(),
                  .topk_weights = topk_weights_.data(),
                  .out = routed_.data(),
                  .num_tokens = T,
                  .hidden = D,
                  .top_k = w_.config.num_experts_per_tok,
                  .experts = &mw.experts,
                  .expert_begin = 0,
                  .expert_end = w_.config.n_routed_experts,
                  .round_outputs_bf16 = ep.combine == payload_dtype::bf16});
}

void forward_step::combine(int64_t layer_idx) {
  if (num_tokens() == 0)
    return;
  const int64_t n = num_tokens() * w_.config.hidden_size;
  if (w_.layers[layer_idx].is_moe)
    b_.add({.out = h_.data(), .x = routed_.data(), .n = n});
  b_.add({.out = h_.data(), .x = shared_.data(), .n = n});
}

void forward_step::append_logit_rows(std::vector<float>& out) const {
  const int64_t D = w_.config.hidden_size;
  for (const int64_t r : logit_rows_)
    out.insert(out.end(), h_.begin() + r * D, h_.begin() + (r + 1) * D);
}

void forward_step::advance_kv() {
  for (size_t s = 0; s < batch_.size(); ++s)  // max: split entries end in any order
    batch_[s].kv->num_cached = std::max(batch_[s].kv->num_cached, ends_[s]);
}

std::vector<float> forward_step::logits() {
  forward_step* self = this;
  return std::move(joint_logits(std::span(&self, 1))[0]);
}

std::vector<std::vector<float>> forward_step::joint_logits(std::span<forward_step* const> steps) {
  std::vector<std::vector<float>> out(steps.size());
  if (steps.empty())
    return out;
  const forward_step& first = *steps[0];
  const model_config& cfg = first.w_.config;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size;
  std::vector<float> rows;
  for (const forward_step* s : steps)
    s->append_logit_rows(rows);
  const int64_t R = static_cast<int64_t>(rows.size()) / D;
  std::vector<float> all(static_cast<size_t>(R * V));
  if (R > 0) {
    first.b_.rms_norm({.x = rows.data(),
                       .weight = first.w_.norm.data(),
                       .out = rows.data(),
                       .num_tokens = R,
                       .dim = D,
                       .eps = static_cast<float>(cfg.rms_norm_eps)});
    first.b_.linear({.x = rows.data(), .w = &first.w_.lm_head, .out = all.data(), .num_tokens = R});
  }
  int64_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t n = static_cast<int64_t>(steps[i]->logit_rows_.size());
    if (steps.size() == 1)
      out[i] = std::move(all);  // one step: its rows are all of them, no copy
    else
      out[i].assign(all.begin() + row * V, all.begin() + (row + n) * V);
    row += n;
    steps[i]->advance_kv();
  }
  return out;
}

}  // namespace moe
