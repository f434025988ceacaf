// kernels/model/kv_cache.hpp
// The paged MLA latent KV cache: per layer, blocks of `block_size` tokens, each token holding
// c_kv (kv_lora_rank, after kv_a_layernorm) and k_rope (qk_rope_head_dim, after RoPE).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/checkpoint/host_memory.hpp"

namespace moe {

/// A pool of KV blocks shared by every sequence of one rank. Blocks are freed exactly once.
class kv_cache {
 public:
  /// storage: [num_layers, num_blocks, block_size, kv_dim] fp32.
  kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_dim);

  [[nodiscard]] kv_layer_view layer(int64_t layer_idx) noexcept;
  [[nodiscard]] int64_t block_size() const noexcept { return block_size_; }
  [[nodiscard]] int64_t num_layers() const noexcept { return num_layers_; }
  [[nodiscard]] int64_t kv_dim() const noexcept { return kv_dim_; }
  [[nodiscard]] int64_t num_blocks() const noexcept { return num_blocks_; }
  [[nodiscard]] int64_t num_free_blocks() const noexcept { return static_cast<int64_t>(free_.size()); }
  /// Blocks needed to hold `num_tokens` tokens.
  [[nodiscard]] int64_t blocks_for(int64_t num_tokens) const noexcept {
    return (num_tokens + block_size_ - 1) / block_size_;
  }
  /// Takes one free block, or nullopt when the pool is exhausted.
  [[nodiscard]] std::optional<int32_t> allocate();
  /// Returns a block to the pool; a double free throws std::logic_error.
  void free(int32_t block_id);

 private:
  int64_t num_layers_, num_blocks_, block_size_, kv_dim_;
  // Not zero-filled: every slot is written (store_kv) before it is read, and untouched pages of
  // a large pool cost nothing until used.
  std::unique_ptr<float[]> storage_;
  std::vector<int32_t> free_;
  std::vector<uint8_t> in_use_;
};

/// Bytes of one kv_cache's storage once every block is in use (fp32 slots); UINT64_MAX when
/// that overflows (no machine has it either way).
[[nodiscard]] constexpr uint64_t kv_cache_bytes(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                                                int64_t kv_dim) noexcept {
  uint64_t bytes = sizeof(float);
  for (const int64_t factor : {num_layers, num_blocks, block_size, kv_dim})
    if (factor < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(factor), &bytes))
      return UINT64_MAX;
  return bytes;
}

/// Refuses (input_error, via require_memory) `num_caches` caches of `num_blocks` blocks each that
/// would not fit in the memory available once all their blocks are in use: a cache's pages are
/// only taken as its blocks fill, so an oversized pool would otherwise run for a while and then
/// be killed mid-request. The message names the blocks per cache that would fit and `flag`.
void require_kv_memory(int64_t num_caches, int64_t num_layers, int64_t num_blocks, int64_t block_size,
                       int64_t kv_dim, std::string_view flag,
                       std::optional<uint64_t> available = available_memory());

/// One sequence's place in the cache: its block table and how many tokens are cached.
struct sequence_kv {
  std::vector<int32_t> block_table;
  int64_t num_cached = 0;

  /// Grows the block table to hold `num_tokens`; false (nothing taken) when the pool is short.
  [[nodiscard]] bool reserve(kv_cache& cache, int64_t num_tokens);
  /// Frees every block (idempotent).
  void release(kv_cache& cache);
};

}  // namespace moe
