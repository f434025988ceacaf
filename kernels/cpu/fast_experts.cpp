// kernels/cpu/fast_experts.cpp
// Routed experts batched per expert: a counting sort groups the (token, k) slots by expert, each
// expert runs its gate/up and down matmuls once over all its slots (so its weights stream once
// per call), and the weighted outputs are summed per token in k order:
//   out[t] = sum_{k = 0..K-1} w[t, k] * y[pos(t, k)]
// Every y row is computed by one task whose kernel and tiling depend only on the routing, so the
// result is bit-identical for any thread count.
#include <algorithm>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe {

using fast::act_rows;
using fast::round_up;

namespace {

// h = silu(g) * u for n values, written as fp32 and, unless hb is null, as bf16 (the down
// matmul's input when the vdpbf16ps tile reads it as it is: BF16 weights, under fma_min_rows).
void silu_mul_row(const float* g, const float* u, int64_t n, float* h, uint16_t* hb) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = fast::tail_mask16(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 e = fast::exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    const __m512 hv = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), uv);
    _mm512_mask_storeu_ps(h + i, m, hv);
    if (hb != nullptr)
      _mm256_mask_storeu_epi16(hb + i, m, fast::f32x16_to_bf16(hv));
  }
}

// One contiguous slice of a buffer, 64-byte aligned.
template <class T>
T* carve(uint8_t*& cursor, int64_t count) {
  T* p = reinterpret_cast<T*>(cursor);
  cursor += round_up(count * static_cast<int64_t>(sizeof(T)), 64);
  return p;
}

bool experts_supported(const moe_experts_params& p) {
  const int64_t inter = (*p.experts)[p.expert_begin].gate_proj.out_features;
  for (int64_t e = p.expert_begin; e < p.expert_end; ++e) {
    const mlp_weights& m = (*p.experts)[e];
    if (!fast::fast_supports(m.gate_proj) || !fast::fast_supports(m.up_proj) ||
        !fast::fast_supports(m.down_proj) || m.gate_proj.out_features != inter ||
        m.up_proj.out_features != inter || m.down_proj.in_features != inter)
      return false;
  }
  return true;
}

}  // namespace

void group_by_expert(const moe_experts_params& p, expert_grouping& g) {
  const int64_t E = p.expert_end - p.expert_begin, slots = p.num_tokens * p.top_k;
  g.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t e = p.topk_ids[s] - p.expert_begin;
    if (e >= 0 && e < E)
      ++g.offsets[e + 1];
  }
  for (int64_t e = 0; e < E; ++e)
    g.offsets[e + 1] += g.offsets[e];
  g.slot_pos.assign(static_cast<size_t>(slots), -1);
  g.pos_slot.resize(static_cast<size_t>(g.offsets[E]));
  g.fill.assign(g.offsets.begin(), g.offsets.end() - 1);
  for (int64_t s = 0; s < slots; ++s) {  // in slot order: stable
    const int64_t e = p.topk_ids[s] - p.expert_begin;
    if (e >= 0 && e < E) {
      g.slot_pos[s] = g.fill[e];
      g.pos_slot[g.fill[e]++] = s;
    }
  }
  g.active.clear();
  for (int64_t e = 0; e < E; ++e)
    if (g.offsets[e + 1] > g.offsets[e])
      g.active.push_back(e);
  std::stable_sort(g.active.begin(), g.active.end(), [&](int64_t a, int64_t b) {
    return g.offsets[a + 1] - g.offsets[a] > g.offsets[b + 1] - g.offsets[b];
  });
}

// x: [num_tokens, hidden] -> out: [num_tokens, hidden]
void cpu_fast_backend::moe_experts(const moe_experts_params& p) {
  if (p.expert_end <= p.expert_begin || p.num_tokens == 0) {
    std::fill_n(p.out, p.num_tokens * p.hidden, 0.0f);
    return;
  }
  if (!experts_supported(p)) {
    cpu_reference_backend::moe_experts(p);
    return;
  }
  const int64_t T = p.num_tokens, K = p.top_k, D = p.hidden;
  const auto& experts = *p.experts;
  const int64_t I = experts[p.expert_begin].gate_proj.out_features;
  expert_grouping& g = grouping_;
  group_by_expert(p, g);
  if (g.active.empty()) {  // no token routes into [expert_begin, expert_end)
    std::fill_n(p.out, p.num_tokens * p.hidden, 0.0f);
    return;
  }
  const int64_t P = static_cast<int64_t>(g.pos_slot.size());

  // Buffers: x rounded once as the experts' kernels read it (fast_linear.hpp: BF16 and FP8
  // weights, times act_factor), as bf16 [T, ldd] for experts of fewer than fma_min_rows rows and
  // for the FMA tiles [T, ldf] for the others, each only if some expert needs it; per position:
  // its x rows, h [P, I] fp32 and bf16, y [P, D].
  const linear_weight& first_gate = experts[p.expert_begin].gate_proj;
  const bool rounded = first_gate.type == dtype::bf16 || first_gate.type == dtype::f8_e4m3;
  const float factor = fast::act_factor(first_gate);
  auto rows_of = [&](int64_t e) { return g.offsets[e + 1] - g.offsets[e]; };  // active: largest first
  const int64_t ldd = rounded && rows_of(g.active.back()) < fast::fma_min_rows ? round_up(D, 32) : 0;
  const int64_t ldf = rounded && rows_of(g.active.front()) >= fast::fma_min_rows ? round_up(D, 16) : 0;
  const int64_t ldi = round_up(I, 32);
  uint8_t* cursor = moe_buf_.get<uint8_t>(round_up(T * ldd * 2, 64) + round_up(T * ldf * 4, 64) +
                                          5 * round_up(P * 8, 64) + round_up(P * I * 4, 64) +
                                          round_up(P * ldi * 2, 64) + round_up(P * D * 4, 64));
  auto* xb = carve<uint16_t>(cursor, T * ldd);
  auto* xf = carve<float>(cursor, T * ldf);
  auto** x_f32 = carve<const float*>(cursor, P);
  auto** x_bf16 = carve<const uint16_t*>(cursor, P);
  auto** x_fma = carve<const float*>(cursor, P);
  auto** h_f32 = carve<const float*>(cursor, P);
  auto** h_bf16 = carve<const uint16_t*>(cursor, P);
  auto* h = carve<float>(cursor, P * I);
  auto* hb = carve<uint16_t>(cursor, P * ldi);
  auto* y = carve<float>(cursor, P * D);
  if (ldd > 0 || ldf > 0)
    split(T, D, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        if (ldd > 0)
          fast::f32_row_to_bf16(p.x + t * D, D, xb + t * ldd, factor);
        if (ldf > 0)
          fast::f32_row_to_fma_pairs(p.x + t * D, D, xf + t * ldf, factor);
      }
    });
  for (int64_t pos = 0; pos < P; ++pos) {
    const int64_t t = g.pos_slot[pos] / K;
    x_f32[pos] = p.x + t * D;
    x_bf16[pos] = xb + t * ldd;
    x_fma[pos] = xf + t * ldf;
    h_f32[pos] = h + pos * I;
    h_bf16[pos] = hb + pos * ldi;
  }

  // Whether an expert of m rows has its h kept in bf16 too, for a down matmul that reads it so.
  const bool bf16_down = experts[p.expert_begin].down_proj.type == dtype::bf16;
  auto keeps_bf16_h = [&](int64_t m) { return bf16_down && m < fast::fma_min_rows; };
  // gate/up: h[pos, r0 .. r0 + nr) = silu(x W_gate^T) * (x W_up^T) for expert e's positions.
  auto gate_up = [&](int64_t e, int64_t r0, int64_t nr, fast::thread_scratch& s) {
    const int64_t begin = g.offsets[e], m = g.offsets[e + 1] - begin;
    const mlp_weights& w = experts[p.expert_begin + e];
    const act_rows a{.num_rows = m,
                     .k = D,
                     .f32 = x_f32 + begin,
                     .bf16 = ldd > 0 ? x_bf16 + begin : nullptr,
                     .fma = ldf > 0 ? x_fma + begin : nullptr,
                     .factor = factor};
    float* gate = s.tile_a.get<float>(m * nr);
    float* up = s.tile_b.get<float>(m * nr);
    fast::linear_rows(a, w.gate_proj, r0, nr, gate, nr, s);
    fast::linear_rows(a, w.up_proj, r0, nr, up, nr, s);
    const bool bf16_h = keeps_bf16_h(m);
    for (int64_t i = 0; i < m; ++i) {
      uint16_t* hb_row = hb + (begin + i) * ldi;
      silu_mul_row(gate + i * nr, up + i * nr, nr, h + (begin + i) * I + r0, bf16_h ? hb_row + r0 : nullptr);
      if (bf16_h && r0 + nr == I)  // bf16 padding, read by the GEMM's last chunk
        std::fill(hb_row + I, hb_row + ldi, uint16_t{0});
    }
  };
  // down: y[pos, r0 .. r0 + nr) = h W_down^T.
  auto down = [&](int64_t e, int64_t r0, int64_t nr, fast::thread_scratch& s) {
    const int64_t begin = g.offsets[e];
    const int64_t m = g.offsets[e + 1] - begin;
    const act_rows a{
      .num_rows = m, .k = I, .f32 = h_f32 + begin, .bf16 = keeps_bf16_h(m) ? h_bf16 + begin : nullptr};
    fast::linear_rows(a, experts[p.expert_begin + e].down_proj, r0, nr, y + begin * D + r0, D, s);
  };

  const auto num_active = static_cast<int64_t>(g.active.size());
  if (num_active >= 2 * pool_.size()) {
    // Enough experts to balance: a task runs a whole expert, one dispatch for all.
    pool_.parallel_for(num_active, [&](int64_t task, int thread) {
      gate_up(g.active[task], 0, I, scratch_[thread]);
      down(g.active[task], 0, D, scratch_[thread]);
    });
  } else {
    // Few experts for the threads: each expert's rows in as few chunks of whole panels as still
    // give ~4 tasks per thread, gate/up then down.
    for (const bool up_phase : {true, false}) {
      const int64_t rows = up_phase ? I : D;
      const int64_t panels = (rows + fast::panel_rows - 1) / fast::panel_rows;
      const int64_t per_expert = std::clamp<int64_t>((4 * pool_.size() + num_active - 1) / num_active, 1,
                                                     panels);
      const int64_t chunk = (panels + per_expert - 1) / per_expert * fast::panel_rows;
      const int64_t chunks = (rows + chunk - 1) / chunk;
      pool_.parallel_for(num_active * chunks, [&](int64_t task, int thread) {
        const int64_t e = g.active[task / chunks], r0 = (task % chunks) * chunk;
        if (up_phase)
          gate_up(e, r0, std::min(chunk, rows - r0), scratch_[thread]);
        else
          down(e, r0, std::min(chunk, rows - r0), scratch_[thread]);
      });
    }
  }

  // out[t] = sum_k w[t, k] * y[pos(t, k)], k in order.
  split(T, D * K, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* o = p.out + t * D;
      std::fill_n(o, D, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t pos = g.slot_pos[t * K + k];
        if (pos < 0)
          continue;
        const float wk = p.topk_weights[t * K + k];
        const float* yr = y + pos * D;
        if (p.round_outputs_bf16)
          for (int64_t i = 0; i < D; ++i)
            o[i] += bf16_to_f32(f32_to_bf16(wk * yr[i]));
        else
          for (int64_t i = 0; i < D; ++i)
            o[i] += wk * yr[i];
      }
    }
  });
}

}  // namespace moe

MOE_FAST_TARGET_END
