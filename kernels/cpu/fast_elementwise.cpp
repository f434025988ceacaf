// kernels/cpu/fast_elementwise.cpp
// The per-token ops that show in prefill profiles (~8% of a 512-token prefill as plain loops):
// RMSNorm, SwiGLU's silu * up, residual adds and BF16 / F32 embedding rows vectorised, and all
// of them plus RoPE and the router split over the pool by token ranges. RoPE, the router and the KV store run the
// reference code on each range (so they match it bit for bit); decode-sized calls stay on the
// calling thread.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe {

using fast::tail_mask16;

namespace {

// One row: out = x * (1 / sqrt(mean(x^2) + eps)) * weight, fp32 (16 partial sums).
void rms_norm_row(const float* x, const float* weight, float* out, int64_t dim, float eps) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < dim; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask16(dim - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float inv_rms = 1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / static_cast<float>(dim) + eps);
  const __m512 s = _mm512_set1_ps(inv_rms);
  for (int64_t i = 0; i < dim; i += 16) {
    const __mmask16 m = tail_mask16(dim - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

}  // namespace

void cpu_fast_backend::rms_norm(const rms_norm_params& p) {
  const int64_t stride = p.stride ? p.stride : p.dim;
  split(p.num_tokens, p.dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      rms_norm_row(p.x + t * stride, p.weight, p.out + t * stride, p.dim, p.eps);
  });
}

void cpu_fast_backend::silu_mul(const silu_mul_params& p) {
  split(p.num_tokens, p.dim, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * p.dim; i < end * p.dim; i += 16) {
      const __mmask16 m = tail_mask16(end * p.dim - i);
      const __m512 g = _mm512_maskz_loadu_ps(m, p.gate + i);
      const __m512 e = fast::exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
      const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
      _mm512_mask_storeu_ps(p.out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, p.up + i)));
    }
  });
}

void cpu_fast_backend::add(const add_params& p) {
  split(p.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 16) {
      const __mmask16 m = tail_mask16(end - i);
      _mm512_mask_storeu_ps(
        p.out + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p.out + i), _mm512_maskz_loadu_ps(m, p.x + i)));
    }
  });
}

void cpu_fast_backend::embedding(const embedding_params& p) {
  const linear_weight& table = *p.table;
  if (table.type != dtype::bf16 && table.type != dtype::f32) {
    cpu_reference_backend::embedding(p);
    return;
  }
  const int64_t dim = table.in_features;
  split(p.num_tokens, dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* out = p.out + t * dim;
      if (table.type == dtype::f32) {
        std::copy_n(static_cast<const float*>(table.data) + p.ids[t] * dim, dim, out);
        continue;
      }
      const uint16_t* row = static_cast<const uint16_t*>(table.data) + p.ids[t] * dim;
      for (int64_t i = 0; i < dim; i += 16) {  // bf16 -> f32: the high half of the bits
        const __mmask16 m = tail_mask16(dim - i);
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + i));
        _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      }
    }
  });
}

void cpu_fast_backend::rope(const rope_params& p) {
  split(p.num_tokens, p.num_heads * p.rope_dim * 8, [&](int64_t begin, int64_t end) {
    rope_params part = p;
    part.x = p.x + begin * p.token_stride;
    part.positions = p.positions + begin;
    part.num_tokens = end - begin;
    cpu_reference_backend::rope(part);
  });
}

void cpu_fast_backend::moe_gate(const moe_gate_params& p) {
  split(p.num_tokens, p.num_experts * 16, [&](int64_t begin, int64_t end) {
    moe_gate_params part = p;
    part.logits = p.logits + begin * p.num_experts;
    part.topk_ids = p.topk_ids + begin * p.top_k;
    part.topk_weights = p.topk_weights + begin * p.top_k;
    part.num_tokens = end - begin;
    cpu_reference_backend::moe_gate(part);
  });
}

}  // namespace moe

MOE_FAST_TARGET_END
