// kernels/model/kv_handoff.cpp
#include "kernels/model/kv_handoff.hpp"

#include <algorithm>
#include <stdexcept>

namespace moe {

kv_pages export_kv(kv_cache& cache, const sequence_kv& seq, int64_t num_tokens) {
  if (num_tokens > seq.num_cached)
    throw std::invalid_argument("export_kv: the sequence has fewer cached tokens than requested");
  kv_pages pages{
    .num_layers = cache.num_layers(), .num_tokens = num_tokens, .kv_dim = cache.kv_dim(), .data = {}};
  pages.data.resize(static_cast<size_t>(pages.num_layers * num_tokens * pages.kv_dim));
  float* out = pages.data.data();
  for (int64_t l = 0; l < pages.num_layers; ++l) {
    const kv_layer_view layer = cache.layer(l);
    for (int64_t t = 0; t < num_tokens; ++t, out += pages.kv_dim)
      std::copy_n(layer.slot(seq.block_table.data(), t), pages.kv_dim, out);
  }
  return pages;
}

void check_import(kv_cache& cache, const sequence_kv& seq, const kv_pages& pages) {
  if (pages.num_layers != cache.num_layers() || pages.kv_dim != cache.kv_dim() ||
      static_cast<int64_t>(pages.data.size()) != pages.num_layers * pages.num_tokens * pages.kv_dim)
    throw std::invalid_argument("import_kv: pages do not match this cache's layers and kv_dim");
  if (static_cast<int64_t>(seq.block_table.size()) * cache.block_size() < pages.num_tokens)
    throw std::invalid_argument("import_kv: the sequence's blocks cannot hold the pages");
}

void write_kv(kv_cache& cache, std::span<const int32_t> block_table, const kv_pages& pages) noexcept {
  const float* in = pages.data.data();
  for (int64_t l = 0; l < pages.num_layers; ++l) {
    const kv_layer_view layer = cache.layer(l);
    for (int64_t t = 0; t < pages.num_tokens; ++t, in += pages.kv_dim)
      std::copy_n(in, pages.kv_dim, layer.slot(block_table.data(), t));
  }
}

void import_kv(kv_cache& cache, sequence_kv& seq, const kv_pages& pages) {
  check_import(cache, seq, pages);
  write_kv(cache, seq.block_table, pages);
  seq.num_cached = pages.num_tokens;
}

}  // namespace moe
