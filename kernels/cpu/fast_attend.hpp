// kernels/cpu/fast_attend.hpp
// The fast path's causal attention for a set of query rows of one sequence, over keys described
// by attention_keys: the paged latent cache itself in the absorbed form (model-spec 5.5: every
// head shares the cached rows [c_kv | k_rope] as keys and c_kv as values, so one task attends
// ~64 (token, head) rows against each block of keys), or one head's expanded k_nope and v beside
// the cached k_rope in the naive form (5.4). Scores, softmax and the weighted sum are fp32.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cpu/fast_linear.hpp"

namespace moe::fast {

/// One query row (token, head) and where its result goes.
struct query_row {
  const float* q = nullptr;  // [key width]: [q_abs | q_rope] or [q_nope | q_rope]
  float* out = nullptr;      // [value width]: o_lat or the head's output
  int64_t pos = 0;           // the token's position: keys 0 .. pos are visible
};

/// Where one part of key j lies: `base + (j - first) * stride + offset` (a buffer holding keys
/// first, first + 1, ...), or `cache.slot(table, j) + offset` when base is null; `dim` floats.
struct key_part {
  const float* base = nullptr;
  int64_t first = 0, stride = 0, offset = 0, dim = 0;
};

/// A sequence's keys and values: key j = [a(j) | b(j)] (a.dim + b.dim floats: the query rows'
/// width), value j = v(j) (v.dim floats: the output rows' width).
struct attention_keys {
  kv_layer_view cache;
  const int32_t* table = nullptr;
  key_part a, b, v;

  [[nodiscard]] const float* at(const key_part& part, int64_t j) const noexcept {
    return part.base ? part.base + (j - part.first) * part.stride + part.offset
                     : cache.slot(table, j) + part.offset;
  }
  [[nodiscard]] int64_t key_dim() const noexcept { return a.dim + b.dim; }
};

/// The absorbed form's keys: the cached rows [c_kv (C) | k_rope], values c_kv.
[[nodiscard]] inline attention_keys latent_keys(const kv_layer_view& cache, const int32_t* table, int64_t C) {
  return {.cache = cache,
          .table = table,
          .a = {.dim = C},
          .b = {.offset = C, .dim = cache.kv_dim - C},
          .v = {.dim = C}};
}

struct attention_rows {
  int64_t num_rows = 0;
  const query_row* row = nullptr;  // [num_rows]
};

/// Keys per chunk. Attention over more keys is computed chunk by chunk, each chunk from a fresh
/// softmax state, and the chunks merged in key order (merge_partial), so a row's numbers are the
/// same whether one task runs its chunks in turn (attend) or tasks on several threads run one
/// chunk each (attend_chunk, then merge_partial): decode at batch 1 splits a long context's
/// chunks over the threads. A multiple of the 32-key blocks the kernels score at a time.
inline constexpr int64_t attend_chunk_keys = 256;

/// A row's attention over one chunk of keys, or several merged: the weighted sum of values
/// before normalisation (o, value-width floats), the largest score and the sum of exp(score - max).
/// Empty (no keys): max -inf, sum 0, o zero.
struct attention_partial {
  float* o = nullptr;
  float max = 0.0f;
  float sum = 0.0f;
};

/// out[r] = sum_j softmax_j(q[r] . key(j) * scale) value(j) over j = 0 .. pos[r].
void attend(const attention_rows& rows, const attention_keys& keys, float scale, thread_scratch& s);

/// Chunk `chunk` of every row's keys (keys [chunk, chunk + 1) * attend_chunk_keys, up to the
/// row's pos) into part[r]: its o must hold keys.v.dim floats. Rows whose pos is before the
/// chunk get an empty partial. Only the chunk's keys are read.
void attend_chunk(const attention_rows& rows, const attention_keys& keys, float scale, int64_t chunk,
                  attention_partial* part, thread_scratch& s);

/// into = into merged with the next chunk `next` (in key order), dim values of o each.
void merge_partial(attention_partial& into, const attention_partial& next, int64_t dim) noexcept;

/// out[c] = p.o[c] / p.sum: a row's attention once all its chunks are merged.
void finish_partial(const attention_partial& p, int64_t dim, float* out) noexcept;

}  // namespace moe::fast
