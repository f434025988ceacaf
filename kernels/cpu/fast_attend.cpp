// kernels/cpu/fast_attend.cpp
// The fast path's causal attention (see fast_attend.hpp), a chunk of up to 256 keys at a time:
// per block of 32 keys, a 16x16-transposed key tile (its two parts in turn) scored against 8
// query rows at a time; then each row's softmax over the chunk's keys at once, and the value sum over
// all of them in 4-row x 64-column register tiles; all fp32. Chunks are merged in key order.
#include "kernels/cpu/fast_attend.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {
namespace {

constexpr int64_t key_block = 32;  // keys scored per step (two zmm of scores per row)

// kt[d0 + d][j] = part[j][d] for j < nk (0 beyond), d < dim: 16x16 transposes of one key part.
void transpose_part(const float* const* part, int64_t nk, int64_t dim, float* kt) {
  for (int64_t d0 = 0; d0 < dim; d0 += 16) {
    const int64_t nd = std::min<int64_t>(16, dim - d0);
    const __mmask16 dmask = static_cast<__mmask16>((1u << nd) - 1);
    for (int64_t j0 = 0; j0 < key_block; j0 += 16) {
      __m512i v[16];
      for (int64_t j = 0; j < 16; ++j)
        v[j] = j0 + j < nk ? _mm512_castps_si512(_mm512_maskz_loadu_ps(dmask, part[j0 + j] + d0))
                           : _mm512_setzero_si512();
      transpose16x16_epi32(v);
      for (int64_t i = 0; i < nd; ++i)
        _mm512_store_si512(kt + (d0 + i) * key_block + j0, v[i]);
    }
  }
}

// scores[r * ld + j] = (q[r] . kt[:, j]) * scale for 8 rows from r0 (fewer at the end), j < 32.
void score_rows(const attention_rows& rows, int64_t r0, const float* kt, int64_t kv_dim, float scale,
                float* scores, int64_t ld) {
  constexpr int R = 8;
  const int64_t n = std::min<int64_t>(R, rows.num_rows - r0);
  const float* q[R];
  for (int r = 0; r < R; ++r)
    q[r] = rows.row[r0 + std::min<int64_t>(r, n - 1)].q;
  __m512 acc[R][2];
  for (auto& a : acc)
    a[0] = a[1] = _mm512_setzero_ps();
  for (int64_t d = 0; d < kv_dim; ++d) {
    const __m512 k0 = _mm512_load_ps(kt + d * key_block), k1 = _mm512_load_ps(kt + d * key_block + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r][d]);
      acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < n; ++r) {
    _mm512_storeu_ps(scores + (r0 + r) * ld, _mm512_mul_ps(acc[r][0], s));
    _mm512_storeu_ps(scores + (r0 + r) * ld + 16, _mm512_mul_ps(acc[r][1], s));
  }
}

// A row's softmax numerator over its first `valid` scores (the keys it sees), in place, and 0
// for the rest of its `width` (a multiple of 16); returns the max and the sum of the numerators.
void softmax_row(float* scores, int64_t valid, int64_t width, float& max, float& sum) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  for (int64_t j = 0; j < width; j += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_mov_ps(ninf, tail_mask16(valid - j), _mm512_loadu_ps(scores + j)));
  max = _mm512_reduce_max_ps(mx);
  const __m512 m = _mm512_set1_ps(max);
  __m512 total = _mm512_setzero_ps();
  for (int64_t j = 0; j < width; j += 16) {
    const __m512 p = _mm512_maskz_mov_ps(tail_mask16(valid - j),
                                         exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + j), m)));
    _mm512_storeu_ps(scores + j, p);
    total = _mm512_add_ps(total, p);
  }
  sum = _mm512_reduce_add_ps(total);
}

// o[r][c] = sum_j p[r * ld + j] * values[j][c], j < nk, c < C: 4 rows x 64 columns a tile.
void accumulate_values(int64_t num_rows, const float* probs, int64_t ld, const float* const* values,
                       int64_t nk, int64_t C, float* o) {
  for (int64_t c0 = 0; c0 < C; c0 += 64) {
    __mmask16 mask[4];
    for (int i = 0; i < 4; ++i)
      mask[i] = tail_mask16(C - c0 - 16 * i);
    for (int64_t r0 = 0; r0 < num_rows; r0 += 4) {
      const int64_t n = std::min<int64_t>(4, num_rows - r0);
      const float* p[4];
      for (int64_t r = 0; r < 4; ++r)
        p[r] = probs + (r0 + std::min(r, n - 1)) * ld;
      __m512 acc[4][4];
      for (auto& row : acc)
        for (auto& v : row)
          v = _mm512_setzero_ps();
      for (int64_t j = 0; j < nk; ++j) {
        __m512 v[4];
        for (int i = 0; i < 4; ++i)
          v[i] = _mm512_maskz_loadu_ps(mask[i], values[j] + c0 + 16 * i);
        for (int64_t r = 0; r < 4; ++r) {
          const __m512 pv = _mm512_set1_ps(p[r][j]);
          for (int i = 0; i < 4; ++i)
            acc[r][i] = _mm512_fmadd_ps(pv, v[i], acc[r][i]);
        }
      }
      // constant row indices: with `r < n` as the bound GCC kept acc in memory as well, storing
      // all 16 accumulators every key (perf: the value pass above the scoring)
      for (int r = 0; r < 4; ++r)
        if (r < n)
          for (int i = 0; i < 4; ++i)
            _mm512_mask_storeu_ps(o + (r0 + r) * C + c0 + 16 * i, mask[i], acc[r][i]);
    }
  }
}

}  // namespace

namespace {

// Keys [kb, ke) (at most attend_chunk_keys) of every row into part[r]: the scores of all of them,
// each row's softmax over the keys it sees (each row's pos >= kb, so it sees at least one), and
// the weighted value sum.
void attend_range(const attention_rows& rows, const attention_keys& keys, float scale, int64_t kb, int64_t ke,
                  attention_partial* part, thread_scratch& s) {
  const int64_t R = rows.num_rows, key_dim = keys.key_dim(), C = keys.v.dim;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < R; ++r)
    max_pos = std::max(max_pos, rows.row[r].pos);
  const int64_t end = std::min(ke, max_pos + 1), nk = end - kb;
  const int64_t ld = round_up(nk, key_block);  // scores a row
  float* kt = s.tile_a.get<float>(key_dim * key_block);
  float* scores = s.tile_b.get<float>(R * (ld + C));  // [R][ld], then the sums [R][C]
  float* o = scores + R * ld;
  auto** ptrs = s.rows_a.get<const float*>(3 * ld);  // each key's two parts and its value
  const float** ka = ptrs;
  const float** kb_part = ptrs + ld;
  const float** values = ptrs + 2 * ld;
  for (int64_t j = 0; j < nk; ++j) {
    ka[j] = keys.at(keys.a, kb + j);
    kb_part[j] = keys.at(keys.b, kb + j);
    values[j] = keys.at(keys.v, kb + j);
  }
  for (int64_t k0 = 0; k0 < nk; k0 += key_block) {
    const int64_t n = std::min(key_block, nk - k0);
    // The next block's rows, now: the cache is read from memory once per step and the hardware
    // prefetcher cannot be relied on (see fast_gemv.cpp). Measured at batch 1 with a 1024-token
    // context, three alternating pairs: +0.2 to +8 % tok/s (the machine swings more than that).
    for (int64_t j = k0 + key_block; j < std::min(nk, k0 + 2 * key_block); ++j)
      for (const auto& [row, dim] : {std::pair{ka[j], keys.a.dim}, std::pair{kb_part[j], keys.b.dim}})
        for (int64_t off = 0; off < dim * 4; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(row) + off, _MM_HINT_T0);
    transpose_part(ka + k0, n, keys.a.dim, kt);
    transpose_part(kb_part + k0, n, keys.b.dim, kt + keys.a.dim * key_block);
    for (int64_t r0 = 0; r0 < R; r0 += 8)
      score_rows(rows, r0, kt, key_dim, scale, scores + k0, ld);
  }
  for (int64_t r = 0; r < R; ++r)
    softmax_row(scores + r * ld, std::min(nk, rows.row[r].pos - kb + 1), ld, part[r].max, part[r].sum);
  accumulate_values(R, scores, ld, values, nk, C, o);
  for (int64_t r = 0; r < R; ++r)
    std::copy_n(o + r * C, C, part[r].o);
}

}  // namespace

void attend_chunk(const attention_rows& rows, const attention_keys& keys, float scale, int64_t chunk,
                  attention_partial* part, thread_scratch& s) {
  const int64_t kb = chunk * attend_chunk_keys, C = keys.v.dim;
  // the rows with keys in this chunk, in order; the others get an empty partial
  auto* live = s.attn_rows.get<query_row>(rows.num_rows);
  auto* live_part = s.attn_chunk.get<attention_partial>(rows.num_rows);
  int64_t n = 0;
  for (int64_t r = 0; r < rows.num_rows; ++r) {
    if (rows.row[r].pos < kb) {
      std::fill_n(part[r].o, C, 0.0f);
      part[r].max = -std::numeric_limits<float>::infinity();
      part[r].sum = 0.0f;
      continue;
    }
    live[n] = rows.row[r];
    live_part[n++] = part[r];
  }
  if (n > 0)
    attend_range({.num_rows = n, .row = live}, keys, scale, kb, kb + attend_chunk_keys, live_part, s);
  for (int64_t r = 0, i = 0; r < rows.num_rows; ++r)
    if (rows.row[r].pos >= kb) {
      part[r].max = live_part[i].max;
      part[r].sum = live_part[i++].sum;
    }
}

void merge_partial(attention_partial& into, const attention_partial& next, int64_t dim) noexcept {
  if (next.sum == 0.0f)  // an empty chunk
    return;
  if (into.sum == 0.0f) {  // the first chunk: taken as it is
    std::copy_n(next.o, dim, into.o);
    into.max = next.max;
    into.sum = next.sum;
    return;
  }
  const float m = std::max(into.max, next.max);
  const float a = std::exp(into.max - m), b = std::exp(next.max - m);
  into.sum = into.sum * a + next.sum * b;
  into.max = m;
  for (int64_t c = 0; c < dim; ++c)
    into.o[c] = into.o[c] * a + next.o[c] * b;
}

void finish_partial(const attention_partial& p, int64_t dim, float* out) noexcept {
  const float inv = 1.0f / p.sum;
  for (int64_t c = 0; c < dim; ++c)
    out[c] = p.o[c] * inv;
}

void attend(const attention_rows& rows, const attention_keys& keys, float scale, thread_scratch& s) {
  const int64_t R = rows.num_rows, C = keys.v.dim;
  int64_t max_pos = 0;
  for (int64_t r = 0; r < R; ++r)
    max_pos = std::max(max_pos, rows.row[r].pos);
  // the running state and one chunk's, each R partials and their R x C values
  const int64_t part_bytes = round_up(R * static_cast<int64_t>(sizeof(attention_partial)), 64);
  auto* buf = s.attn_state.get<uint8_t>(2 * part_bytes + 2 * R * C * 4);
  auto* state = reinterpret_cast<attention_partial*>(buf);
  auto* chunk = reinterpret_cast<attention_partial*>(buf + part_bytes);
  auto* values = reinterpret_cast<float*>(buf + 2 * part_bytes);
  for (int64_t r = 0; r < R; ++r) {
    state[r] = {.o = values + r * C, .max = -std::numeric_limits<float>::infinity(), .sum = 0.0f};
    chunk[r] = {.o = values + (R + r) * C};
  }
  for (int64_t c = 0; c <= max_pos / attend_chunk_keys; ++c) {
    attend_chunk(rows, keys, scale, c, chunk, s);
    for (int64_t r = 0; r < R; ++r)
      merge_partial(state[r], chunk[r], C);
  }
  for (int64_t r = 0; r < R; ++r)
    finish_partial(state[r], C, rows.row[r].out);
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
