// kernels/cpu/fast_attend.hpp
// The fast path's causal attention over the paged latent cache for a set of query rows of one
// sequence (absorbed MLA, model-spec 5.5): every head shares the cached rows [c_kv | k_rope] as
// keys and c_kv as values, so one task attends up to ~64 (token, head) rows against each block
// of keys. Scores, softmax and the weighted sum are fp32.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/cpu/fast_linear.hpp"

namespace moe::fast {

/// One query row (token, head) and where its result goes.
struct query_row {
  const float* q = nullptr;                 // [kv_dim] = [q_abs (C) | q_rope (dr)], rope applied
  float* out = nullptr;                     // o_lat [C]
  int64_t pos = 0;                          // the token's position: keys 0 .. pos are visible
};

struct attention_rows {
  int64_t num_rows = 0;
  const query_row* row = nullptr;           // [num_rows]
};

/// Keys per chunk. Attention over more keys is computed chunk by chunk, each chunk from a fresh
/// softmax state, and the chunks merged in key order (merge_partial), so a row's numbers are the
/// same whether one task runs its chunks in turn (attend) or tasks on several threads run one
/// chunk each (attend_chunk, then merge_partial): decode at batch 1 splits a long context's
/// chunks over the threads. A multiple of the 32-key blocks the kernels score at a time.
inline constexpr int64_t attend_chunk_keys = 256;

/// A row's attention over one chunk of keys, or several merged: the weighted sum of c_kv
/// before normalisation (o, C values), the largest score and the sum of exp(score - max).
/// Empty (no keys): max -inf, sum 0, o zero.
struct attention_partial {
  float* o = nullptr;
  float max = 0.0f;
  float sum = 0.0f;
};

/// out[r] = sum_j softmax_j(q[r] . key(j) * scale) c_kv(j) over j = 0 .. pos[r] of the sequence
/// whose block table is `table`; C = kv_lora_rank, cache.kv_dim = C + rope_dim.
void attend(const attention_rows& rows, const kv_layer_view& cache, const int32_t* table, int64_t C,
            float scale, thread_scratch& s);

/// Chunk `chunk` of every row's keys (keys [chunk, chunk + 1) * attend_chunk_keys, up to the
/// row's pos) into part[r]: its o must hold C floats. Rows whose pos is before the chunk get an
/// empty partial.
void attend_chunk(const attention_rows& rows, const kv_layer_view& cache, const int32_t* table, int64_t C,
                  float scale, int64_t chunk, attention_partial* part, thread_scratch& s);

/// into = into merged with the next chunk `next` (in key order), C values of o each.
void merge_partial(attention_partial& into, const attention_partial& next, int64_t C) noexcept;

/// out[c] = p.o[c] / p.sum: a row's attention once all its chunks are merged.
void finish_partial(const attention_partial& p, int64_t C, float* out) noexcept;

}  // namespace moe::fast
