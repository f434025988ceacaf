// tests/cpu/test_fast_attention.cpp
// The fast backend's absorbed MLA against the reference: prefill (one sequence, causal), decode
// (many sequences, one token each) and a mix, over a paged cache with partial blocks.
#include <doctest/doctest.h>

#include <cstring>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

// H = 4 heads, dn 32, dr 8, dv 48, C 96: kv_dim 104 (not a multiple of 16), kv_b [320, 96].
constexpr int64_t H = 4, dn = 32, dr = 8, dv = 48, C = 96, kv_dim = C + dr, block_size = 16;

struct attention_case {
  std::vector<float> cache, q;
  std::vector<std::vector<int32_t>> tables;
  std::vector<const int32_t*> table_ptrs;
  std::vector<int32_t> seq_idx, positions;
  int64_t tokens = 0;
};

// `seq_lens[s]` new tokens of sequence s at the end of `seq_lens[s] + past[s]` cached tokens;
// blocks are handed out in reverse so block tables are not the identity.
attention_case make_case(const std::vector<int64_t>& seq_lens, const std::vector<int64_t>& past,
                         uint32_t seed) {
  attention_case c;
  int64_t num_blocks = 0;
  for (size_t s = 0; s < seq_lens.size(); ++s)
    num_blocks += (seq_lens[s] + past[s] + block_size - 1) / block_size;
  c.cache = test::random_floats(num_blocks * block_size * kv_dim, seed);
  int32_t next_block = static_cast<int32_t>(num_blocks);
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    std::vector<int32_t> table;
    for (int64_t b = 0; b < (seq_lens[s] + past[s] + block_size - 1) / block_size; ++b)
      table.push_back(--next_block);
    c.tables.push_back(table);
    for (int64_t i = 0; i < seq_lens[s]; ++i) {
      c.seq_idx.push_back(static_cast<int32_t>(s));
      c.positions.push_back(static_cast<int32_t>(past[s] + i));
    }
  }
  for (const auto& t : c.tables)
    c.table_ptrs.push_back(t.data());
  c.tokens = static_cast<int64_t>(c.seq_idx.size());
  c.q = test::random_floats(c.tokens * H * (dn + dr), seed + 1);
  return c;
}

std::vector<float> run(backend& b, attention_case& c, const linear_weight& kv_b) {
  std::vector<float> out(static_cast<size_t>(c.tokens * H * dv), -3.0f);
  b.mla_attention({.q = c.q.data(), .out = out.data(), .num_tokens = c.tokens, .num_heads = H,
                   .nope_dim = dn, .rope_dim = dr, .v_dim = dv, .kv_lora_rank = C, .kv_b_proj = &kv_b,
                   .softmax_scale = 0.3f, .form = attention_form::absorbed,
                   .cache = {.base = c.cache.data(), .block_size = block_size, .kv_dim = kv_dim},
                   .layout = {.seq_idx = c.seq_idx.data(), .positions = c.positions.data(),
                              .block_tables = c.table_ptrs.data()}});
  return out;
}

}  // namespace

TEST_CASE("fast: absorbed mla_attention matches the reference for prefill, decode and mixed batches") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast2(2);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3, dtype::f32}) {
    const auto kv_b = test::random_weight(type, H * (dn + dv), C, 21);
    for (int64_t tokens : {1, 3, 17, 64, 200}) {
      const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> layouts = {
          {{tokens}, {0}},                                    // prefill from position 0
          {std::vector<int64_t>(static_cast<size_t>(tokens), 1),   // decode: one token per sequence
           [&] { std::vector<int64_t> p; for (int64_t s = 0; s < tokens; ++s) p.push_back((s * 37) % 90); return p; }()},
          {{tokens, 2}, {40, 5}},                             // chunked prefill next to a short one
      };
      for (size_t l = 0; l < layouts.size(); ++l) {
        CAPTURE(dtype_name(type));
        CAPTURE(tokens);
        CAPTURE(l);
        attention_case c = make_case(layouts[l].first, layouts[l].second, 100u + static_cast<uint32_t>(tokens));
        const auto want = run(ref, c, kv_b->w);
        const auto got = run(fast2, c, kv_b->w);
        // bf16 q_nope and o_lat into bf16 W_UK / W_UV (FP8 dequantised once, rounded to bf16);
        // scores, softmax and the weighted sum in fp32. Measured rms error 0.002 (BF16) to
        // 0.0045 (FP8: three roundings) of the output RMS, the worst element ~12x that.
        const bool rounded = type != dtype::f32;
        CHECK(test::rms_rel_error(got, want) < (rounded ? 1e-2 : 1e-5));
        CHECK(test::max_rel_error(got, want) < (rounded ? 8e-2 : 1e-4));
        const auto got1 = run(fast1, c, kv_b->w);
        CHECK(std::memcmp(got.data(), got1.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}
