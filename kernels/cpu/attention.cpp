// kernels/cpu/attention.cpp
// MLA over the paged latent cache: writing latents, and causal attention in the naive form
// (model-spec 5.4, per-head keys and values expanded from the latents) or the absorbed form
// (5.5, W_UK folded into q and W_UV applied after the weighted sum). Both are the same math.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// kv: [num_tokens, kv_dim] rows kv_stride apart -> cache slots of each token's position
void cpu_reference_backend::store_kv(const store_kv_params& p) {
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int32_t* table = p.layout.block_tables[p.layout.seq_idx[t]];
    float* slot = p.cache.slot(table, p.layout.positions[t]);
    std::copy_n(p.kv + t * p.kv_stride, p.cache.kv_dim, slot);
  }
}

namespace {

// In place: scores -> softmax(scores), fp64.
void softmax(std::vector<double>& scores) {
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0.0;
  for (double& s : scores)
    sum += (s = std::exp(s - max));
  for (double& s : scores)
    s /= sum;
}

// k_nope and v of keys 0 .. last of one sequence for every head, fp64, each key expanded once:
// [key][h][dn + dv].
std::vector<double> expand_keys(const mla_attention_params& p, const int32_t* table, int64_t last) {
  const int64_t C = p.kv_lora_rank, width = p.nope_dim + p.v_dim, H = p.num_heads;
  const linear_weight& w = *p.kv_b_proj;
  std::vector<double> kv(static_cast<size_t>((last + 1) * H * width));
  for (int64_t j = 0; j <= last; ++j) {
    const float* entry = p.cache.slot(table, j);  // [c_kv (C) | k_rope (dr)]
    for (int64_t r = 0; r < H * width; ++r) {     // W_UK[h] c_kv, then W_UV[h] c_kv
      double k = 0.0;
      for (int64_t c = 0; c < C; ++c)
        k += static_cast<double>(w.at(r, c)) * entry[c];
      kv[static_cast<size_t>(j * H * width + r)] = k;
    }
  }
  return kv;
}

// One head of one token, naive form, over its sequence's expanded keys.
void attend_naive(const mla_attention_params& p, const float* q, const int32_t* table, const double* kv,
                  int64_t pos, int64_t h, float* out) {
  const int64_t dn = p.nope_dim, dv = p.v_dim, stride = p.num_heads * (dn + dv), C = p.kv_lora_rank;
  std::vector<double> scores(static_cast<size_t>(pos + 1));
  std::vector<double> o(static_cast<size_t>(dv), 0.0);
  for (int64_t j = 0; j <= pos; ++j) {
    const double* k_nope = kv + j * stride + h * (dn + dv);
    const float* entry = p.cache.slot(table, j);
    double s = 0.0;
    for (int64_t d = 0; d < dn; ++d)  // q_nope . k_nope
      s += q[d] * k_nope[d];
    for (int64_t r = 0; r < p.rope_dim; ++r)
      s += static_cast<double>(q[dn + r]) * entry[C + r];
    scores[j] = s * p.softmax_scale;
  }
  softmax(scores);
  for (int64_t j = 0; j <= pos; ++j) {
    const double* v = kv + j * stride + h * (dn + dv) + dn;
    for (int64_t d = 0; d < dv; ++d)
      o[d] += scores[j] * v[d];
  }
  for (int64_t d = 0; d < dv; ++d)
    out[d] = static_cast<float>(o[d]);
}

// One head of one token, absorbed form: attention in the latent space.
void attend_absorbed(const mla_attention_params& p, const float* q, const int32_t* table, int64_t pos,
                     int64_t h, float* out) {
  const int64_t C = p.kv_lora_rank, dn = p.nope_dim, dv = p.v_dim, row0 = h * (dn + dv);
  const linear_weight& w = *p.kv_b_proj;
  std::vector<double> q_abs(static_cast<size_t>(C), 0.0);  // W_UK[h]^T q_nope
  for (int64_t d = 0; d < dn; ++d)
    for (int64_t c = 0; c < C; ++c)
      q_abs[c] += static_cast<double>(w.at(row0 + d, c)) * q[d];
  std::vector<double> scores(static_cast<size_t>(pos + 1));
  for (int64_t j = 0; j <= pos; ++j) {
    const float* entry = p.cache.slot(table, j);
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c)
      s += q_abs[c] * entry[c];
    for (int64_t r = 0; r < p.rope_dim; ++r)
      s += static_cast<double>(q[dn + r]) * entry[C + r];
    scores[j] = s * p.softmax_scale;
  }
  softmax(scores);
  std::vector<double> o_lat(static_cast<size_t>(C), 0.0);  // sum_j P_j c_kv(j)
  for (int64_t j = 0; j <= pos; ++j) {
    const float* entry = p.cache.slot(table, j);
    for (int64_t c = 0; c < C; ++c)
      o_lat[c] += scores[j] * entry[c];
  }
  for (int64_t d = 0; d < dv; ++d) {  // W_UV[h] o_lat
    double v = 0.0;
    for (int64_t c = 0; c < C; ++c)
      v += static_cast<double>(w.at(row0 + dn + d, c)) * o_lat[c];
    out[d] = static_cast<float>(v);
  }
}

}  // namespace

// q: [num_tokens, H, dn + dr] -> out: [num_tokens, H * dv]
void cpu_reference_backend::mla_attention(const mla_attention_params& p) {
  const int64_t dq = p.nope_dim + p.rope_dim;
  auto form_of = [&](int64_t seq) { return p.seq_form ? p.seq_form[seq] : p.form; };
  // the naive form's sequences: keys 0 .. their last position expanded once
  std::vector<int64_t> last;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int32_t seq = p.layout.seq_idx[t];
    if (form_of(seq) != attention_form::naive)
      continue;
    if (static_cast<int64_t>(last.size()) <= seq)
      last.resize(static_cast<size_t>(seq) + 1, -1);
    last[seq] = std::max<int64_t>(last[seq], p.layout.positions[t]);
  }
  std::vector<std::vector<double>> expanded(last.size());
  for (size_t seq = 0; seq < last.size(); ++seq)
    if (last[seq] >= 0)
      expanded[seq] = expand_keys(p, p.layout.block_tables[seq], last[seq]);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int32_t seq = p.layout.seq_idx[t];
    const int32_t* table = p.layout.block_tables[seq];
    const int64_t pos = p.layout.positions[t];
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const float* q = p.q + (t * p.num_heads + h) * dq;
      float* out = p.out + (t * p.num_heads + h) * p.v_dim;
      if (form_of(seq) == attention_form::naive)
        attend_naive(p, q, table, expanded[seq].data(), pos, h, out);
      else
        attend_absorbed(p, q, table, pos, h, out);
    }
  }
}

}  // namespace moe
