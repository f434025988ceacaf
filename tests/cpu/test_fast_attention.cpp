// tests/cpu/test_fast_attention.cpp
// The fast backend's MLA in either form against the reference: prefill (one sequence, causal),
// decode (many sequences, one token each) and a mix, over a paged cache with partial blocks; a
// row's bits whatever shares its call (other sequences, the other form, threads, segments).
#include <doctest/doctest.h>

#include <cstring>

#include "kernels/cpu/fast_backend.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

struct mla_shape {
  int64_t H, dn, dr, dv, C;
  [[nodiscard]] int64_t kv_dim() const { return C + dr; }
};
// 4 heads, dn 32, dr 8, dv 48, C 96: kv_dim 104 (not a multiple of 16), kv_b [320, 96] (its
// W_UK^T / W_UV do not fit FP8 panels: bf16 absorbed weights).
constexpr mla_shape odd_shape{4, 32, 8, 48, 96};
// The small preset's per-head shape with 2 heads: kv_b [256, 128], one 128-row scale block per
// head, so an FP8 kv_b is absorbed as FP8 panels.
constexpr mla_shape panel_shape{2, 64, 32, 64, 128};
constexpr int64_t block_size = 16;

struct attention_case {
  std::vector<float> cache, q;
  std::vector<std::vector<int32_t>> tables;
  std::vector<const int32_t*> table_ptrs;
  std::vector<int32_t> seq_idx, positions;
  int64_t tokens = 0;
};

// `seq_lens[s]` new tokens of sequence s at the end of `seq_lens[s] + past[s]` cached tokens;
// blocks are handed out in reverse so block tables are not the identity.
attention_case make_case(const mla_shape& m, const std::vector<int64_t>& seq_lens,
                         const std::vector<int64_t>& past, uint32_t seed) {
  const int64_t kv_dim = m.kv_dim();
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
  c.q = test::random_floats(c.tokens * m.H * (m.dn + m.dr), seed + 1);
  return c;
}

mla_attention_params params(const mla_shape& m, attention_case& c, const linear_weight& kv_b, float* out,
                            attention_form form = attention_form::absorbed,
                            const attention_form* seq_form = nullptr) {
  return {.q = c.q.data(),
          .out = out,
          .num_tokens = c.tokens,
          .num_heads = m.H,
          .nope_dim = m.dn,
          .rope_dim = m.dr,
          .v_dim = m.dv,
          .kv_lora_rank = m.C,
          .kv_b_proj = &kv_b,
          .softmax_scale = 0.3f,
          .form = form,
          .seq_form = seq_form,
          .cache = {.base = c.cache.data(), .block_size = block_size, .kv_dim = m.kv_dim()},
          .layout = {.seq_idx = c.seq_idx.data(),
                     .positions = c.positions.data(),
                     .block_tables = c.table_ptrs.data()}};
}

std::vector<float> run(const mla_shape& m, backend& b, attention_case& c, const linear_weight& kv_b,
                       attention_form form = attention_form::absorbed,
                       const attention_form* seq_form = nullptr) {
  std::vector<float> out(static_cast<size_t>(c.tokens * m.H * m.dv), -3.0f);
  b.mla_attention(params(m, c, kv_b, out.data(), form, seq_form));
  return out;
}

// The tokens [first, first + count) of c as a call of their own (the same cache and tables).
attention_case tokens_of(const mla_shape& m, const attention_case& c, int64_t first, int64_t count) {
  attention_case sub = c;
  const int64_t dq = m.H * (m.dn + m.dr);
  sub.q.assign(c.q.begin() + first * dq, c.q.begin() + (first + count) * dq);
  sub.seq_idx.assign(c.seq_idx.begin() + first, c.seq_idx.begin() + first + count);
  sub.positions.assign(c.positions.begin() + first, c.positions.begin() + first + count);
  sub.tokens = count;
  sub.table_ptrs.clear();
  for (const auto& t : sub.tables)
    sub.table_ptrs.push_back(t.data());
  return sub;
}

// Rows [first, first + count) of an output of H * dv floats a token.
std::vector<float> rows_of(const mla_shape& m, const std::vector<float>& out, int64_t first, int64_t count) {
  const int64_t w = m.H * m.dv;
  return {out.begin() + first * w, out.begin() + (first + count) * w};
}

}  // namespace

TEST_CASE("fast: absorbed mla_attention matches the reference for prefill, decode and mixed batches") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast2(2);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3, dtype::f32}) {
    const mla_shape& m = odd_shape;
    const auto kv_b = test::random_weight(type, m.H * (m.dn + m.dv), m.C, 21);
    for (int64_t tokens : {1, 3, 17, 64, 200}) {
      const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> layouts = {
        {{tokens}, {0}},                                        // prefill from position 0
        {std::vector<int64_t>(static_cast<size_t>(tokens), 1),  // decode: one token per sequence
         [&] {
           std::vector<int64_t> p;
           for (int64_t s = 0; s < tokens; ++s)
             p.push_back((s * 37) % 90);
           return p;
         }()},
        {{tokens, 2}, {40, 5}},  // chunked prefill next to a short one
        {{tokens}, {230}},       // a prefill chunk whose rows straddle the 256-key chunks
      };
      for (size_t l = 0; l < layouts.size(); ++l) {
        CAPTURE(dtype_name(type));
        CAPTURE(tokens);
        CAPTURE(l);
        attention_case c = make_case(m, layouts[l].first, layouts[l].second,
                                     100u + static_cast<uint32_t>(tokens));
        const auto want = run(m, ref, c, kv_b->w);
        const auto got = run(m, fast2, c, kv_b->w);
        // bf16 q_nope and o_lat into bf16 W_UK / W_UV (FP8 dequantised once, rounded to bf16);
        // scores, softmax and the weighted sum in fp32. Measured rms error 0.002 (BF16) to
        // 0.0045 (FP8: three roundings) of the output RMS, the worst element ~12x that.
        const bool rounded = type != dtype::f32;
        CHECK(test::rms_rel_error(got, want) < (rounded ? 1e-2 : 1e-5));
        CHECK(test::max_rel_error(got, want) < (rounded ? 8e-2 : 1e-4));
        const auto got1 = run(m, fast1, c, kv_b->w);
        CHECK(std::memcmp(got.data(), got1.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("fast: naive mla_attention matches the reference for prefill, decode and mixed batches") {
  // Each 256-key chunk of a sequence expanded through kv_b_proj (bf16 latents into the weight's
  // GEMM; fp32 k_nope and v), then scores, softmax and the weighted sum in fp32.
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast3(3);
  for (dtype type : {dtype::bf16, dtype::f8_e4m3, dtype::f32}) {
    for (const mla_shape* shape : {&odd_shape, &panel_shape}) {
      const mla_shape& m = *shape;
      const auto kv_b = test::random_weight(type, m.H * (m.dn + m.dv), m.C, 31);
      // FP8 as the loader lays it out (panels) where the shape allows
      const bool panels = type == dtype::f8_e4m3 && shape == &panel_shape;
      const auto stored = panels ? test::to_fp8_panels(*kv_b) : nullptr;
      const linear_weight& w = panels ? stored->w : kv_b->w;
      for (int64_t tokens : {1, 17, 200}) {
        const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> layouts = {
          {{tokens}, {0}},            // prefill from position 0
          {{tokens, 2}, {40, 5}},     // chunked prefill next to a short one
          {{tokens}, {230}},          // rows straddling the 256-key chunks
          {{1, 1, 1}, {3, 300, 70}},  // decode-shaped, in the naive form
        };
        for (size_t l = 0; l < layouts.size(); ++l) {
          CAPTURE(dtype_name(type));
          CAPTURE(m.C);
          CAPTURE(tokens);
          CAPTURE(l);
          attention_case c = make_case(m, layouts[l].first, layouts[l].second,
                                       500u + static_cast<uint32_t>(tokens));
          const auto want = run(m, ref, c, w, attention_form::naive);
          const auto got = run(m, fast3, c, w, attention_form::naive);
          // bf16 latents into bf16 / FP8 kv_b, fp32 from there: measured rms errors up to 0.004
          // of the output RMS, the worst element 0.055
          const bool rounded = type != dtype::f32;
          CHECK(test::rms_rel_error(got, want) < (rounded ? 1e-2 : 1e-5));
          CHECK(test::max_rel_error(got, want) < (rounded ? 8e-2 : 1e-4));
          const auto got1 = run(m, fast1, c, w, attention_form::naive);
          CHECK(std::memcmp(got.data(), got1.data(), got.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("fast: a row's bits do not depend on what shares its call") {
  // A prompt's rows in the naive form, computed in one call, in two segments, or beside another
  // prompt and a decode row in the absorbed form (seq_form); the decode row the same bits as in
  // a call of its own; and the naive rows nothing like the absorbed form's bits (the forms differ).
  MOE_SKIP_WITHOUT_FAST_PATH();
  const mla_shape& m = panel_shape;
  const auto kv_b = test::random_weight(dtype::f8_e4m3, m.H * (m.dn + m.dv), m.C, 37);
  const auto stored = test::to_fp8_panels(*kv_b);
  const linear_weight& w = stored->w;
  cpu_fast_backend fast2(2), fast3(3);
  // sequence 0: a 150-token prompt segment from position 200; 1: a 40-token prompt; 2: a decode row
  attention_case all = make_case(m, {150, 40, 1}, {200, 0, 90}, 41u);
  const attention_form forms[] = {attention_form::naive, attention_form::naive, attention_form::absorbed};
  const auto mixed = run(m, fast2, all, w, attention_form::absorbed, forms);

  attention_case first = tokens_of(m, all, 0, 150);
  const auto whole = run(m, fast3, first, w, attention_form::naive);
  CHECK(rows_of(m, mixed, 0, 150) == whole);
  attention_case head = tokens_of(m, all, 0, 61), tail = tokens_of(m, all, 61, 89);
  auto split = run(m, fast2, head, w, attention_form::naive);
  const auto rest = run(m, fast2, tail, w, attention_form::naive);
  split.insert(split.end(), rest.begin(), rest.end());
  CHECK(split == whole);
  attention_case second = tokens_of(m, all, 150, 40);
  CHECK(rows_of(m, mixed, 150, 40) == run(m, fast2, second, w, attention_form::naive));
  attention_case decode = tokens_of(m, all, 190, 1);
  CHECK(rows_of(m, mixed, 190, 1) == run(m, fast3, decode, w, attention_form::absorbed));
  CHECK(whole != run(m, fast2, first, w, attention_form::absorbed));
}

TEST_CASE("fast: an FP8 kv_b with a scale block per head is absorbed as exact FP8 panels") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const mla_shape& m = panel_shape;
  auto kv_b = test::random_weight(dtype::f8_e4m3, m.H * (m.dn + m.dv), m.C, 23);
  cpu_reference_backend ref;
  cpu_fast_backend fast(2);
  for (const bool panels : {false, true}) {  // kv_b itself in either layout
    CAPTURE(panels);
    const auto stored = panels ? test::to_fp8_panels(*kv_b) : nullptr;
    const linear_weight& w = panels ? stored->w : kv_b->w;
    attention_case c = make_case(m, {1, 1, 1}, {5, 40, 70}, 7u);  // decode: three sequences
    std::vector<float> out(static_cast<size_t>(c.tokens * m.H * m.dv));
    const absorbed_kv_b& ab = fast.absorbed(params(m, c, w, out.data()));
    REQUIRE(ab.uk_t.size() == 2);
    for (int64_t h = 0; h < m.H; ++h) {
      CAPTURE(h);
      CHECK(ab.uk_t[h].layout == weight_layout::fp8_panels);
      CHECK(ab.uv[h].layout == weight_layout::fp8_panels);
      for (int64_t c0 = 0; c0 < m.C; ++c0)  // the very values of kv_b
        for (int64_t j = 0; j < m.dn; ++j)
          REQUIRE(ab.uk_t[h].at(c0, j) == w.at(h * (m.dn + m.dv) + j, c0));
      for (int64_t i = 0; i < m.dv; ++i)
        for (int64_t c0 = 0; c0 < m.C; ++c0)
          REQUIRE(ab.uv[h].at(i, c0) == w.at(h * (m.dn + m.dv) + m.dn + i, c0));
    }
    for (const auto& [lens, past] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{1, 1, 1}, {5, 40, 70}}, {{50}, {0}}}) {  // decode (fused), prefill (phased)
      attention_case d = make_case(m, lens, past, 9u);
      const auto want = run(m, ref, d, w);
      const auto got = run(m, fast, d, w);
      CHECK(test::rms_rel_error(got, want) < 1e-2);
      CHECK(test::max_rel_error(got, want) < 8e-2);
    }
  }
}

TEST_CASE("fast: an FP8 kv_b whose scale blocks straddle the heads is absorbed in bf16") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const mla_shape& m = panel_shape;
  auto kv_b = test::random_weight(dtype::f8_e4m3, m.H * (m.dn + m.dv), m.C, 29);
  kv_b->w.block_rows = 96;  // rows 96-191: head 0's W_UV and head 1's W_UK
  kv_b->scales.assign(static_cast<size_t>(((m.H * (m.dn + m.dv) + 95) / 96) * 1), 0.01f);
  kv_b->scales[1] = 0.02f;
  kv_b->w.scale_inv = kv_b->scales.data();
  cpu_fast_backend fast(2);
  attention_case c = make_case(m, {1}, {3}, 7u);
  std::vector<float> out(static_cast<size_t>(c.tokens * m.H * m.dv));
  const absorbed_kv_b& ab = fast.absorbed(params(m, c, kv_b->w, out.data()));
  REQUIRE(ab.uk_t.size() == 2);
  CHECK(ab.uk_t[0].type == dtype::bf16);
  CHECK(ab.uv[1].type == dtype::bf16);
  CHECK(ab.fp8.empty());
  CHECK(ab.uv[0].at(0, 0) == bf16_to_f32(f32_to_bf16(kv_b->w.at(m.dn, 0))));
}

TEST_CASE("fast: long contexts in key chunks give the same numbers split over threads or not") {
  // Past fast::attend_chunk_keys keys a row's attention is merged from chunks. Decode at batch 1
  // with two chunks per thread splits them over tasks; one thread, or a batch of sequences, runs
  // them in one task: the same bits either way, and the reference's numbers.
  MOE_SKIP_WITHOUT_FAST_PATH();
  cpu_reference_backend ref;
  cpu_fast_backend fast1(1), fast2(2), fast3(3);
  const mla_shape& m = odd_shape;
  // F32: W_UV reads o_lat unrounded, so a last-bit change in the attention shows in the output
  // (bf16 would round it away)
  const auto kv_b = test::random_weight(dtype::f32, m.H * (m.dn + m.dv), m.C, 23);
  // 1 and 2 chunks (no split), 4 (split on two threads), 7 (on three too)
  for (int64_t past : {255, 300, 800, 1600}) {
    CAPTURE(past);
    attention_case alone = make_case(m, {1}, {past}, 300u + static_cast<uint32_t>(past));
    const auto want = run(m, ref, alone, kv_b->w);
    const auto split = run(m, fast2, alone, kv_b->w);
    CHECK(test::rms_rel_error(split, want) < 1e-5);
    CHECK(test::max_rel_error(split, want) < 1e-4);
    const auto one_task = run(m, fast1, alone, kv_b->w);
    CHECK(std::memcmp(split.data(), one_task.data(), split.size() * sizeof(float)) == 0);
    const auto three = run(m, fast3, alone, kv_b->w);
    CHECK(std::memcmp(split.data(), three.data(), split.size() * sizeof(float)) == 0);

    // the same sequence beside two others (enough tasks for the threads: no split)
    attention_case batch = make_case(m, {1, 1, 1}, {past, 20, 900}, 300u + static_cast<uint32_t>(past));
    // make_case draws the cache and q for the whole batch: copy the lone case's row and keys in
    const int64_t kv_dim = m.kv_dim(), qd = m.H * (m.dn + m.dr);
    std::copy_n(alone.q.begin(), qd, batch.q.begin());
    for (int64_t pos = 0; pos <= past; ++pos)
      std::copy_n(
        alone.cache.begin() + (alone.tables[0][pos / block_size] * block_size + pos % block_size) * kv_dim,
        kv_dim,
        batch.cache.begin() + (batch.tables[0][pos / block_size] * block_size + pos % block_size) * kv_dim);
    const auto batched = run(m, fast2, batch, kv_b->w);
    CHECK(std::memcmp(split.data(), batched.data(), split.size() * sizeof(float)) == 0);
  }
}
