// kernels/cpu/embedding.cpp
// Token embedding look-up.
#include "kernels/cpu/reference_backend.hpp"

namespace moe {

// table: [V, D], ids: [num_tokens] -> out: [num_tokens, D]
void cpu_reference_backend::embedding(const embedding_params& p) {
  const int64_t dim = p.table->in_features;
  for (int64_t t = 0; t < p.num_tokens; ++t)
    for (int64_t i = 0; i < dim; ++i)
      p.out[t * dim + i] = p.table->at(p.ids[t], i);
}

}  // namespace moe
