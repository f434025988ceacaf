// kernels/model/kv_cache.cpp
// Block pool accounting and storage of the paged latent KV cache.
#include "kernels/model/kv_cache.hpp"

#include <stdexcept>
#include <string>

namespace moe {

void require_kv_memory(int64_t num_caches, int64_t num_layers, int64_t num_blocks, int64_t block_size,
                       int64_t kv_dim, std::string_view flag, std::optional<uint64_t> available) {
  // every cache's layers as one cache of num_caches x num_layers layers: kv_cache_bytes saturates
  const int64_t layers = num_caches * num_layers;
  const uint64_t all = kv_cache_bytes(layers, num_blocks, block_size, kv_dim);
  if (!available || all <= *available)
    return;
  const uint64_t per_all_caches = kv_cache_bytes(layers, 1, block_size, kv_dim);  // one block in each
  const uint64_t fit = *available / per_all_caches;
  if (fit == 0)  // not even one block: the blocks are too big
    require_memory(per_all_caches,
                   "one KV block of " + std::to_string(block_size) + " tokens x " +
                     std::to_string(num_layers) + " layers x " + std::to_string(kv_dim) + " fp32 values" +
                     (num_caches > 1 ? " in each of " + std::to_string(num_caches) + " caches" : ""),
                   ": lower --page-size", available);
  require_memory(all,
                 "the KV cache" +
                   std::string(num_caches > 1 ? "s (" + std::to_string(num_caches) + " x " : " (") +
                   std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) + " tokens x " +
                   std::to_string(num_layers) + " layers x " + std::to_string(kv_dim) +
                   " fp32 values) with every block in use",
                 ": lower " + std::string(flag) + " to at most " + std::to_string(fit) +
                   (num_caches > 1 ? " blocks per cache" : " blocks"),
                 available);
}

namespace {

// The storage's float count, checked before anything is allocated.
size_t kv_floats(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_dim) {
  if (num_blocks <= 0 || block_size <= 0 || num_blocks > INT32_MAX || num_layers < 0 || kv_dim < 0)
    throw std::invalid_argument("kv_cache: num_blocks (at most 2^31 - 1) and block_size must be positive");
  const uint64_t bytes = kv_cache_bytes(num_layers, num_blocks, block_size, kv_dim);
  if (bytes == UINT64_MAX)
    throw std::invalid_argument("kv_cache: " + std::to_string(num_blocks) + " blocks of " +
                                std::to_string(block_size) + " tokens overflow a size");
  return static_cast<size_t>(bytes / sizeof(float));
}

}  // namespace

kv_cache::kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_dim)
    : num_layers_(num_layers), num_blocks_(num_blocks), block_size_(block_size), kv_dim_(kv_dim),
      storage_(new float[kv_floats(num_layers, num_blocks, block_size, kv_dim)]),
      in_use_(static_cast<size_t>(num_blocks), 0) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b)  // hand out low ids first
    free_.push_back(static_cast<int32_t>(b));
}

kv_layer_view kv_cache::layer(int64_t layer_idx) noexcept {
  return {.base = storage_.get() + layer_idx * num_blocks_ * block_size_ * kv_dim_,
          .block_size = block_size_,
          .kv_dim = kv_dim_};
}

std::optional<int32_t> kv_cache::allocate() {
  if (free_.empty())
    return std::nullopt;
  const int32_t id = free_.back();
  free_.pop_back();
  in_use_[id] = 1;
  return id;
}

void kv_cache::free(int32_t block_id) {
  if (block_id < 0 || block_id >= num_blocks_ || !in_use_[block_id])
    throw std::logic_error("kv_cache: block " + std::to_string(block_id) + " freed twice or never allocated");
  in_use_[block_id] = 0;
  free_.push_back(block_id);
}

bool sequence_kv::reserve(kv_cache& cache, int64_t num_tokens) {
  const int64_t needed = cache.blocks_for(num_tokens) - static_cast<int64_t>(block_table.size());
  if (needed <= 0)
    return true;
  if (needed > cache.num_free_blocks())
    return false;
  for (int64_t i = 0; i < needed; ++i)
    block_table.push_back(*cache.allocate());
  return true;
}

void sequence_kv::release(kv_cache& cache) {
  for (int32_t b : block_table)
    cache.free(b);
  block_table.clear();
  num_cached = 0;
}

}  // namespace moe
