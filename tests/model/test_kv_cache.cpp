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
  CHECK(a.reserve(cache, 9));                                // 9 tokens -> 3 blocks
  CHECK(a.block_table.size() == 3);
  CHECK(cache.num_free_blocks() == 2);
  CHECK_FALSE(b.reserve(cache, 12));                         // needs 3, only 2 free: takes none
  CHECK(b.block_table.empty());
  CHECK(cache.num_free_blocks() == 2);
  a.release(cache);
  a.release(cache);                                          // idempotent
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
