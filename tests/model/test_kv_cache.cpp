// tests/model/test_kv_cache.cpp
// Block accounting of the paged KV cache: reserve, release, exhaustion, double free.
#include <doctest/doctest.h>

#include "kernels/model/kv_cache.hpp"

using namespace moe;

TEST_CASE("sequences take whole blocks and give them back exactly once") {
  kv_cache cache(/*layers=*/2, /*blocks=*/5, /*block_size=*/4, /*kv_dim=*/3);
  sequence_kv a, b;
  CHECK(a.reserve(cache, 1));
  CHECK(a.block_table.size() == 1);
  CHECK(a.reserve(cache, 4));
  CHECK(a.block_table.size() == 1);
  CHECK(a.reserve(cache, 9));  // 9 tokens -> 3 blocks
  CHECK(a.block_table.size() == 3);
  CHECK(cache.num_free_blocks() == 2);
  CHECK_FALSE(b.reserve(cache, 12));  // needs 3, only 2 free: takes none
  CHECK(b.block_table.empty());
  CHECK(cache.num_free_blocks() == 2);
  a.release(cache);
  a.release(cache);  // idempotent
  CHECK(cache.num_free_blocks() == 5);
  CHECK_THROWS_AS(cache.free(0), std::logic_error);
}

TEST_CASE("a slot addresses block_table[pos / block_size] at pos % block_size") {
  kv_cache cache(1, 4, 2, 3);
  const kv_layer_view v = cache.layer(0);
  const int32_t table[] = {3, 1};
  CHECK(v.slot(table, 0) == v.base + (3 * 2 + 0) * 3);
  CHECK(v.slot(table, 3) == v.base + (1 * 2 + 1) * 3);
}

TEST_CASE("KV pools that could not fit in memory with every block in use are refused") {
  // one block of V3's cache: 61 layers x 64 tokens x (512 + 64) fp32 = 8,994,816 bytes
  CHECK(kv_cache_bytes(61, 1, 64, 576) == 8994816);
  CHECK(kv_cache_bytes(61, 10, 64, 576) == 89948160);
  const uint64_t available = 100000000;  // 4 caches x 2 blocks = 71,958,528 fit, x 3 do not
  CHECK_NOTHROW(require_kv_memory(4, 61, 2, 64, 576, "--kv-blocks", available));
  CHECK_NOTHROW(require_kv_memory(4, 61, 1000000, 64, 576, "--kv-blocks", std::nullopt));
  auto error = [&](int64_t caches, int64_t blocks) -> std::string {
    try {
      require_kv_memory(caches, 61, blocks, 64, 576, "--kv-blocks", available);
    } catch (const input_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(error(4, 10) ==
        "the KV caches (4 x 10 blocks of 64 tokens x 61 layers x 576 fp32 values) with every block in use "
        "would take 0.36 GB of memory, but 0.10 GB is available (MemAvailable in /proc/meminfo): "
        "lower --kv-blocks to at most 2 blocks per cache");
  CHECK(error(1, 12) ==  // 107,937,792 bytes
        "the KV cache (12 blocks of 64 tokens x 61 layers x 576 fp32 values) with every block in use "
        "would take 0.11 GB of memory, but 0.10 GB is available (MemAvailable in /proc/meminfo): "
        "lower --kv-blocks to at most 11 blocks");
  // not even one block fits (12 caches x 8,994,816 bytes > 0.10 GB): the page size is the fault
  CHECK(error(12, 1) ==
        "one KV block of 64 tokens x 61 layers x 576 fp32 values in each of 12 caches would take 0.11 GB "
        "of memory, but 0.10 GB is available (MemAvailable in /proc/meminfo): lower --page-size");
  // sizes that overflow 64 bits saturate (refused), never wrap to a size that fits
  CHECK(kv_cache_bytes(61, int64_t{1} << 40, 1 << 30, 576) == UINT64_MAX);
  CHECK_THROWS_AS(require_kv_memory(2, 61, int64_t{1} << 40, 1 << 30, 576, "--kv-blocks", available),
                  input_error);
  CHECK_THROWS_AS(kv_cache(61, int64_t{1} << 30, int64_t{1} << 41, 576), std::invalid_argument);
}
