// kernels/model/kv_handoff.hpp
// Moving a sequence's latent KV cache between ranks (prefill -> decode): the cached c_kv and
// k_rope of every layer, packed token-major per layer as one raw buffer.
#pragma once

#include <cstdint>
#include <span>
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

/// Throws std::invalid_argument unless `pages` match the cache's layers and kv_dim and `seq`'s
/// blocks can hold pages.num_tokens tokens.
void check_import(kv_cache& cache, const sequence_kv& seq, const kv_pages& pages);

/// Writes `pages` into the blocks of `block_table` (what check_import checked); the copy alone,
/// so a rank can run it on its stream while its actor keeps the bookkeeping.
void write_kv(kv_cache& cache, std::span<const int32_t> block_table, const kv_pages& pages) noexcept;

/// check_import, write_kv into seq's blocks, then seq.num_cached = pages.num_tokens.
void import_kv(kv_cache& cache, sequence_kv& seq, const kv_pages& pages);

}  // namespace moe
