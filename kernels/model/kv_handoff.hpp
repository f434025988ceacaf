// kernels/model/kv_handoff.hpp
// Moving a sequence's latent KV cache between ranks (prefill -> decode): the cached c_kv and
// k_rope of every layer, packed token-major per layer as one raw buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/model/kv_cache.hpp"

namespace moe {

/// A sequence's latent KV: [num_layers, num_tokens, kv_dim] fp32.
struct kv_pages {
  int64_t num_layers = 0;
  int64_t num_tokens = 0;
  int64_t kv_dim = 0;
  std::vector<float> data;
};

/// Copies the first `num_tokens` cached tokens of `seq` out of `cache`.
[[nodiscard]] kv_pages export_kv(kv_cache& cache, const sequence_kv& seq, int64_t num_tokens);

/// Writes `pages` into `seq`'s blocks (which must already hold pages.num_tokens tokens) and sets
/// seq.num_cached; throws std::invalid_argument when the shapes disagree with the cache.
void import_kv(kv_cache& cache, sequence_kv& seq, const kv_pages& pages);

}  // namespace moe
