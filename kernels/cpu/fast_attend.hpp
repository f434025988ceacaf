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

/// out[r] = sum_j softmax_j(q[r] . key(j) * scale) c_kv(j) over j = 0 .. pos[r] of the sequence
/// whose block table is `table`; C = kv_lora_rank, cache.kv_dim = C + rope_dim.
void attend(const attention_rows& rows, const kv_layer_view& cache, const int32_t* table, int64_t C,
            float scale, thread_scratch& s);

}  // namespace moe::fast
