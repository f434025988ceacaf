// kernels/cpu/fast_attention.cpp
// MLA on the fast path, each sequence in its form (mla_attention_params::seq_form): a call with
// both runs each form on its own tokens. The causal attention itself is fast_attend.hpp's.
//
// Naive form (model-spec 5.4; prompts, by default): per 256-key chunk, every sequence's keys of
// the chunk are expanded into k_nope and v for all heads by one kv_b_proj GEMM, then a task per
// (sequence, block of 64 query tokens, head) attends its rows to the chunk, merging into each
// row's running softmax state; memory stays bounded by the chunk, however long the context.
//
// Absorbed form (5.5; decode steps, by default). W_UK^T and W_UV come from
// kv_b_proj, dequantised once per weight (absorbed_kv_b). Work is split into (sequence, block of
// <= 64 / heads-per-group query tokens, group of heads) tasks:
//   decode-shaped batches (every sequence one block): each task computes its rows' q_abs =
//     W_UK[h]^T q_nope, attends, and applies W_UV: one dispatch for the whole op;
//   prefill-shaped batches: three phases, so W_UK / W_UV are applied to all tokens at once:
//     A. q_abs per head, B. attention tasks, C. out = W_UV[h] o_lat per head;
//   too few tasks for the threads and a long context (decode at batch 1): the three phases,
//     with B's tasks split by key chunk and C merging each row's chunks (attention_plan).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/fast_attend.hpp"
#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe {

using fast::act_rows;
using fast::attention_rows;
using fast::query_row;
using fast::round_up;

namespace {

constexpr int64_t max_task_rows = 64;       // query rows (token, head) per attention task
constexpr int64_t naive_block_tokens = 64;  // query tokens (of one head) per naive-form task

// FNV-1a over the shape, dtype, scale pointer and three 64-byte windows of the data.
uint64_t fingerprint(const linear_weight& w, const mla_attention_params& p) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  };
  const int64_t fields[] = {static_cast<int64_t>(w.type),
                            static_cast<int64_t>(w.layout),
                            w.out_features,
                            w.in_features,
                            p.num_heads,
                            p.nope_dim,
                            p.v_dim,
                            p.kv_lora_rank,
                            static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.scale_inv))};
  mix(fields, sizeof(fields));
  const int64_t bytes = w.num_bytes(), window = std::min<int64_t>(64, bytes);
  for (int64_t at : {int64_t{0}, bytes / 2 - window / 2, bytes - window})
    mix(static_cast<const uint8_t*>(w.data) + std::max<int64_t>(0, at), static_cast<size_t>(window));
  return h;
}

// W_UK[h]^T [C, dn] and W_UV[h] [dv, C] of an FP8 kv_b as FP8 panels, codes copied as they are,
// each new 128 x 128 block taking the one kv_b block scale all its elements share. False (and
// nothing kept) when a new block would straddle two kv_b blocks or a shape does not fit panels.
bool absorb_fp8(const linear_weight& w, int64_t H, int64_t dn, int64_t dv, int64_t C, absorbed_kv_b& ab) {
  if (w.type != dtype::f8_e4m3 || !fp8_panels_fit(C, dn) || !fp8_panels_fit(dv, C))
    return false;
  const int64_t scale_cols = (w.in_features + w.block_cols - 1) / w.block_cols;
  ab.fp8.resize(static_cast<size_t>(H * C * (dn + dv)));
  const auto* codes = static_cast<const uint8_t*>(w.data);
  // One matrix [rows, cols]: element (r, c) is kv_b (row0 + src_row(r, c), src_col(r, c)).
  auto build = [&](uint8_t* dst, int64_t rows, int64_t cols, auto src) {
    const int64_t brows = (rows + 127) / 128, bcols = (cols + 127) / 128;
    const size_t first_scale = ab.fp8_scales.size();
    ab.fp8_scales.resize(first_scale + static_cast<size_t>(brows * bcols), std::nanf(""));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const auto [o, i] = src(r, c);
        dst[fp8_panel_offset(r, c, cols)] = codes[w.index(o, i)];
        const float scale = w.scale_inv[(o / w.block_rows) * scale_cols + i / w.block_cols];
        float& mine = ab.fp8_scales[first_scale + static_cast<size_t>((r / 128) * bcols + c / 128)];
        if (std::isnan(mine))
          mine = scale;
        else if (mine != scale)
          return false;
      }
    return true;
  };
  std::vector<size_t> scale_at;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t row0 = h * (dn + dv);
    uint8_t* uk = ab.fp8.data() + h * C * dn;
    uint8_t* uv = ab.fp8.data() + H * C * dn + h * dv * C;
    scale_at.push_back(ab.fp8_scales.size());
    if (!build(uk, C, dn, [&](int64_t c, int64_t j) { return std::pair{row0 + j, c}; }))
      break;
    scale_at.push_back(ab.fp8_scales.size());
    if (!build(uv, dv, C, [&](int64_t i, int64_t c) { return std::pair{row0 + dn + i, c}; }))
      break;
  }
  if (static_cast<int64_t>(scale_at.size()) != 2 * H ||
      std::any_of(ab.fp8_scales.begin(), ab.fp8_scales.end(), [](float x) { return std::isnan(x); })) {
    ab.fp8.clear();
    ab.fp8_scales.clear();
    return false;
  }
  for (int64_t h = 0; h < H; ++h) {
    ab.uk_t.push_back({.type = dtype::f8_e4m3,
                       .data = ab.fp8.data() + h * C * dn,
                       .layout = weight_layout::fp8_panels,
                       .out_features = C,
                       .in_features = dn,
                       .scale_inv = ab.fp8_scales.data() + scale_at[2 * h]});
    ab.uv.push_back({.type = dtype::f8_e4m3,
                     .data = ab.fp8.data() + H * C * dn + h * dv * C,
                     .layout = weight_layout::fp8_panels,
                     .out_features = dv,
                     .in_features = C,
                     .scale_inv = ab.fp8_scales.data() + scale_at[2 * h + 1]});
  }
  return true;
}

}  // namespace

const absorbed_kv_b& cpu_fast_backend::absorbed(const mla_attention_params& p) {
  const std::lock_guard lock(cache_mutex_);
  const uint64_t print = fingerprint(*p.kv_b_proj, p);
  auto& slot = absorbed_[p.kv_b_proj->data];
  if (slot && slot->fingerprint == print)
    return *slot;
  const linear_weight& w = *p.kv_b_proj;
  const int64_t H = p.num_heads, dn = p.nope_dim, dv = p.v_dim, C = p.kv_lora_rank;
  auto ab = std::make_unique<absorbed_kv_b>();
  ab->fingerprint = print;
  if (absorb_fp8(w, H, dn, dv, C, *ab)) {
    slot = std::move(ab);
    return *slot;
  }
  const bool exact = w.type == dtype::f32 || w.type == dtype::f16;
  const int64_t n = H * C * (dn + dv);
  (exact ? ab->f32.resize(n) : ab->bf16.resize(n));
  auto store = [&](int64_t i, float v) {
    if (exact)
      ab->f32[i] = v;
    else
      ab->bf16[i] = f32_to_bf16(v);
  };
  // [H, C, dn] = W_UK[h]^T, then [H, dv, C] = W_UV[h].
  pool_.parallel_for(H, [&](int64_t h, int) {
    const int64_t row0 = h * (dn + dv);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < dn; ++j)
        store((h * C + c) * dn + j, w.at(row0 + j, c));
    for (int64_t i = 0; i < dv; ++i)
      for (int64_t c = 0; c < C; ++c)
        store(H * C * dn + (h * dv + i) * C + c, w.at(row0 + dn + i, c));
  });
  const dtype type = exact ? dtype::f32 : dtype::bf16;
  auto* base = exact ? static_cast<void*>(ab->f32.data()) : static_cast<void*>(ab->bf16.data());
  const int64_t elem = dtype_size(type);
  for (int64_t h = 0; h < H; ++h) {
    ab->uk_t.push_back({.type = type,
                        .data = static_cast<uint8_t*>(base) + h * C * dn * elem,
                        .out_features = C,
                        .in_features = dn});
    ab->uv.push_back({.type = type,
                      .data = static_cast<uint8_t*>(base) + (H * C * dn + h * dv * C) * elem,
                      .out_features = dv,
                      .in_features = C});
  }
  if (!exact) {  // BF16 goes through the GEMM's tile: packed once here
    std::vector<linear_weight*> all;
    for (int64_t h = 0; h < H; ++h)
      all.insert(all.end(), {&ab->uk_t[h], &ab->uv[h]});
    ab->panels = fast::lay_out(all);
  }
  slot = std::move(ab);
  return *slot;
}

namespace {

// A call's tokens by sequence, cut into blocks of up to `block_tokens` of a sequence's tokens
// (the query rows one task takes per head).
struct token_blocks {
  struct block {
    int64_t seq, first, count, max_pos;  // tokens seq_tokens[seq][first .. first + count)
  };
  std::vector<std::vector<int64_t>> seq_tokens;
  std::vector<block> blocks;  // each sequence's in order
};

token_blocks block_tokens(const mla_attention_params& p, int64_t block_tokens) {
  token_blocks b;
  int64_t num_seqs = 0;
  for (int64_t t = 0; t < p.num_tokens; ++t)
    num_seqs = std::max<int64_t>(num_seqs, p.layout.seq_idx[t] + 1);
  b.seq_tokens.resize(static_cast<size_t>(num_seqs));
  for (int64_t t = 0; t < p.num_tokens; ++t)
    b.seq_tokens[p.layout.seq_idx[t]].push_back(t);
  for (int64_t sq = 0; sq < num_seqs; ++sq) {
    const auto& toks = b.seq_tokens[sq];
    for (size_t i = 0; i < toks.size(); i += static_cast<size_t>(block_tokens)) {
      const int64_t count = std::min<int64_t>(block_tokens, static_cast<int64_t>(toks.size() - i));
      int64_t max_pos = 0;
      for (int64_t j = 0; j < count; ++j)
        max_pos = std::max<int64_t>(max_pos, p.layout.positions[toks[i + j]]);
      b.blocks.push_back({sq, static_cast<int64_t>(i), count, max_pos});
    }
  }
  return b;
}

}  // namespace

// Attention tasks: (sequence, block of up to `token_block` of its tokens, group of heads);
// blocks sorted longest keys first, for the dynamic schedule.
struct attention_plan : token_blocks {
  int64_t head_group = 0, head_groups = 0;
  bool fused = false;  // every sequence fits one block: one pass per task
  // > 1: fewer (block, head group) tasks than threads and keys in at least two chunks per thread
  // (decode at batch 1 with a long context): phase B runs a task per (block, head group, key
  // chunk), each chunk's rows from a fresh softmax state, and phase C merges each row's chunks
  // in key order, as fast::attend merges them in one task, so the numbers are the same either
  // way. Splitting keys rather than heads transposes each key block once, not once per head
  // group: the small preset's attention at batch 1 on two threads, 1000 keys 135-142 -> 122-135
  // us, 4000 keys 485-548 -> 433-485 us (alternated; at 300 keys, 256 + 44 split worse than
  // heads: 49-54 -> 63-68 us, so it waits for two chunks per thread).
  int64_t key_chunks = 1;
};

namespace {

attention_plan plan_attention(const mla_attention_params& p, int num_threads) {
  // <= 64 query rows per task; the token blocking never depends on the thread count.
  const int64_t H = p.num_heads, head_group = std::min<int64_t>(H, 16);
  const int64_t token_block = std::max<int64_t>(1, max_task_rows / head_group);
  attention_plan plan{block_tokens(p, token_block)};
  plan.head_group = head_group;
  plan.fused = std::all_of(plan.seq_tokens.begin(), plan.seq_tokens.end(), [&](const auto& toks) {
    return static_cast<int64_t>(toks.size()) <= token_block;
  });
  std::stable_sort(plan.blocks.begin(), plan.blocks.end(),
                   [](const auto& a, const auto& b) { return a.max_pos > b.max_pos; });
  const auto num_blocks = static_cast<int64_t>(plan.blocks.size());
  const int64_t chunks = num_blocks > 0 ? plan.blocks.front().max_pos / fast::attend_chunk_keys + 1 : 1;
  if (num_blocks * ((H + plan.head_group - 1) / plan.head_group) < num_threads) {  // fill threads
    if (chunks >= 2 * num_threads) {  // fewer chunks split unevenly (300 keys: 256 + 44)
      plan.key_chunks = chunks;
      plan.fused = false;
    } else {
      plan.head_group = std::max<int64_t>(1, (H * num_blocks + num_threads - 1) / num_threads);
    }
  }
  plan.head_groups = (H + plan.head_group - 1) / plan.head_group;
  return plan;
}

}  // namespace

namespace {

// The tokens `keep` of p as a call of their own: q rows gathered, the layout's arrays for them,
// out into its own buffer (scatter_out puts it back).
struct token_subset {
  std::vector<float> q, out;
  std::vector<int32_t> seq_idx, positions;
  mla_attention_params p;

  token_subset(const mla_attention_params& all, const std::vector<int64_t>& keep) : p(all) {
    const int64_t dq = all.num_heads * (all.nope_dim + all.rope_dim), dout = all.num_heads * all.v_dim;
    for (const int64_t t : keep) {
      q.insert(q.end(), all.q + t * dq, all.q + (t + 1) * dq);
      seq_idx.push_back(all.layout.seq_idx[t]);
      positions.push_back(all.layout.positions[t]);
    }
    out.resize(keep.size() * static_cast<size_t>(dout));
    p.q = q.data();
    p.out = out.data();
    p.num_tokens = static_cast<int64_t>(keep.size());
    p.layout.seq_idx = seq_idx.data();
    p.layout.positions = positions.data();
  }
  void scatter_out(const mla_attention_params& all, const std::vector<int64_t>& keep) const {
    const int64_t dout = all.num_heads * all.v_dim;
    for (size_t i = 0; i < keep.size(); ++i)
      std::copy_n(out.data() + static_cast<int64_t>(i) * dout, dout, all.out + keep[i] * dout);
  }
};

}  // namespace

// q: [num_tokens, H, dn + dr] -> out: [num_tokens, H * dv]
void cpu_fast_backend::mla_attention(const mla_attention_params& p) {
  if (!fast::fast_supports(*p.kv_b_proj) || p.cache.kv_dim != p.kv_lora_rank + p.rope_dim) {
    cpu_reference_backend::mla_attention(p);
    return;
  }
  std::vector<int64_t> by_form[2];  // tokens of naive, absorbed sequences
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const attention_form f = p.seq_form ? p.seq_form[p.layout.seq_idx[t]] : p.form;
    by_form[f == attention_form::naive ? 0 : 1].push_back(t);
  }
  if (by_form[1].empty())
    return attention_naive(p);
  if (by_form[0].empty())
    return attention_absorbed(p);
  for (int f = 0; f < 2; ++f) {  // both: each form's tokens as a call of their own
    token_subset sub(p, by_form[f]);
    (f == 0 ? attention_naive(sub.p) : attention_absorbed(sub.p));
    sub.scatter_out(p, by_form[f]);
  }
}

void cpu_fast_backend::attention_absorbed(const mla_attention_params& p) {
  const absorbed_kv_b& ab = absorbed(p);
  const attention_plan plan = plan_attention(p, pool_.size());
  if (plan.fused)
    attention_fused(p, ab, plan);
  else
    attention_phased(p, ab, plan);
}

void cpu_fast_backend::attention_naive(const mla_attention_params& p) {
  const int64_t T = p.num_tokens, H = p.num_heads, dn = p.nope_dim, dr = p.rope_dim, dq = dn + dr;
  const int64_t dv = p.v_dim, C = p.kv_lora_rank, width = H * (dn + dv);  // an expanded key's floats
  const int64_t chunk_keys = fast::attend_chunk_keys;
  const auto [seq_tokens, blocks] = block_tokens(p, naive_block_tokens);
  const auto num_seqs = static_cast<int64_t>(seq_tokens.size());
  std::vector<int64_t> seq_max(static_cast<size_t>(num_seqs), -1), key_row(static_cast<size_t>(num_seqs));
  for (const auto& b : blocks)
    seq_max[b.seq] = std::max(seq_max[b.seq], b.max_pos);
  int64_t num_chunks = 0, chunk_rows = 0;  // the most keys one chunk expands
  for (int64_t sq = 0; sq < num_seqs; ++sq)
    if (seq_max[sq] >= 0) {
      num_chunks = std::max(num_chunks, seq_max[sq] / chunk_keys + 1);
      chunk_rows += std::min(chunk_keys, seq_max[sq] + 1);
    }
  // Buffers: each row's (t, h) running state and its dv values; one chunk's expanded keys and
  // the pointers to their latents.
  const int64_t rows = T * H, part_bytes = static_cast<int64_t>(sizeof(fast::attention_partial));
  uint8_t* cursor = naive_buf_.get<uint8_t>(round_up(rows * part_bytes, 64) + round_up(rows * dv * 4, 64) +
                                            round_up(chunk_rows * width * 4, 64) +
                                            round_up(chunk_rows * 8, 64));
  auto take = [&](int64_t bytes) {
    uint8_t* at = cursor;
    cursor += round_up(bytes, 64);
    return at;
  };
  auto* state = reinterpret_cast<fast::attention_partial*>(take(rows * part_bytes));
  auto* values = reinterpret_cast<float*>(take(rows * dv * 4));
  auto* expanded = reinterpret_cast<float*>(take(chunk_rows * width * 4));
  auto** latents = reinterpret_cast<const float**>(take(chunk_rows * 8));
  for (int64_t i = 0; i < rows; ++i)
    state[i] = {.o = values + i * dv, .max = -std::numeric_limits<float>::infinity(), .sum = 0.0f};

  std::vector<int64_t> live;  // blocks with keys in the chunk
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t kb = c * chunk_keys;
    // expanded[key_row[s] + j - kb] = kv_b_proj c_kv(j): [k_nope | v] per head, for the chunk's
    // keys j of every sequence that reaches it
    int64_t n = 0;
    for (int64_t sq = 0; sq < num_seqs; ++sq) {
      if (seq_max[sq] < kb)
        continue;
      key_row[sq] = n;
      const int32_t* table = p.layout.block_tables[sq];
      for (int64_t j = kb; j <= std::min(seq_max[sq], kb + chunk_keys - 1); ++j)
        latents[n++] = p.cache.slot(table, j);
    }
    parallel_linear(gemm_input(latents, n, *p.kv_b_proj), *p.kv_b_proj, expanded, width);
    live.clear();
    for (size_t b = 0; b < blocks.size(); ++b)
      if (blocks[b].max_pos >= kb)
        live.push_back(static_cast<int64_t>(b));
    pool_.parallel_for(static_cast<int64_t>(live.size()) * H, [&](int64_t task, int thread) {
      const auto& b = blocks[live[task / H]];
      const int64_t h = task % H;
      const int64_t* toks = seq_tokens[b.seq].data() + b.first;
      fast::thread_scratch& s = scratch_[thread];
      auto* row = s.rows_b.get<query_row>(b.count);
      const int64_t parts_bytes = round_up(b.count * part_bytes, 64);  // this chunk of each row
      uint8_t* buf = s.attn_state.get<uint8_t>(parts_bytes + b.count * dv * 4);
      auto* part = reinterpret_cast<fast::attention_partial*>(buf);
      auto* part_values = reinterpret_cast<float*>(buf + parts_bytes);
      for (int64_t j = 0; j < b.count; ++j) {
        row[j] = {.q = p.q + (toks[j] * H + h) * dq, .pos = p.layout.positions[toks[j]]};
        part[j] = {.o = part_values + j * dv};
      }
      const float* mine = expanded + key_row[b.seq] * width + h * (dn + dv);
      const fast::attention_keys keys{
        .cache = p.cache,
        .table = p.layout.block_tables[b.seq],
        .a = {.base = mine, .first = kb, .stride = width, .dim = dn},
        .b = {.offset = C, .dim = dr},
        .v = {.base = mine, .first = kb, .stride = width, .offset = dn, .dim = dv}};
      fast::attend_chunk({.num_rows = b.count, .row = row}, keys, p.softmax_scale, c, part, s);
      for (int64_t j = 0; j < b.count; ++j)
        fast::merge_partial(state[toks[j] * H + h], part[j], dv);
    });
  }
  split(rows, dv, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      fast::finish_partial(state[i], dv, p.out + i * dv);
  });
}

// Decode-shaped batches: each task computes q_abs for its rows, attends, and projects its o_lat
// through W_UV, so one dispatch does the whole op.
void cpu_fast_backend::attention_fused(const mla_attention_params& p, const absorbed_kv_b& ab,
                                       const attention_plan& plan) {
  const int64_t H = p.num_heads, dn = p.nope_dim, dr = p.rope_dim, dq = dn + dr, dv = p.v_dim;
  const int64_t C = p.kv_lora_rank, kv_dim = C + dr;
  pool_.parallel_for(static_cast<int64_t>(plan.blocks.size()) * plan.head_groups, [&](int64_t task,
                                                                                      int thread) {
    const auto& b = plan.blocks[task / plan.head_groups];
    const int64_t h0 = (task % plan.head_groups) * plan.head_group;
    const int64_t nh = std::min(plan.head_group, H - h0), n = b.count * nh;
    const int64_t* toks = plan.seq_tokens[b.seq].data() + b.first;
    fast::thread_scratch& s = scratch_[thread];
    float* q = s.attn_q.get<float>(n * kv_dim);            // [count][nh][kv_dim]
    float* o = s.attn_o.get<float>(n * C + b.count * dv);  // [count][nh][C], then [count][dv]
    float* v = o + n * C;
    auto** in = s.attn_ptrs.get<const float*>(b.count);
    auto* row = s.rows_b.get<query_row>(n);
    for (int64_t hh = 0; hh < nh; ++hh) {  // q_abs = W_UK[h]^T q_nope, q_rope
      const int64_t h = h0 + hh;
      for (int64_t j = 0; j < b.count; ++j) {
        in[j] = p.q + (toks[j] * H + h) * dq;
        std::copy_n(in[j] + dn, dr, q + (j * nh + hh) * kv_dim + C);
      }
      fast::linear_rows({.num_rows = b.count, .k = dn, .f32 = in}, ab.uk_t[h], 0, C, q + hh * kv_dim,
                        nh * kv_dim, s);
    }
    for (int64_t j = 0; j < b.count; ++j)
      for (int64_t hh = 0; hh < nh; ++hh)
        row[j * nh + hh] = {
          .q = q + (j * nh + hh) * kv_dim, .out = o + (j * nh + hh) * C, .pos = p.layout.positions[toks[j]]};
    fast::attend({.num_rows = n, .row = row}, fast::latent_keys(p.cache, p.layout.block_tables[b.seq], C),
                 p.softmax_scale, s);
    for (int64_t hh = 0; hh < nh; ++hh) {  // out = W_UV[h] o_lat
      const int64_t h = h0 + hh;
      for (int64_t j = 0; j < b.count; ++j)
        in[j] = o + (j * nh + hh) * C;
      fast::linear_rows({.num_rows = b.count, .k = C, .f32 = in}, ab.uv[h], 0, dv, v, dv, s);
      for (int64_t j = 0; j < b.count; ++j)
        std::copy_n(v + j * dv, dv, p.out + (toks[j] * H + h) * dv);
    }
  });
}

// Prefill-shaped batches, in three phases so W_UK / W_UV are applied to all tokens at once.
void cpu_fast_backend::attention_phased(const mla_attention_params& p, const absorbed_kv_b& ab,
                                        const attention_plan& plan) {
  const int64_t T = p.num_tokens, H = p.num_heads, dn = p.nope_dim, dr = p.rope_dim;
  const int64_t dq = dn + dr, dv = p.v_dim, C = p.kv_lora_rank, kv_dim = C + dr;

  // Buffers: qc [T, H, kv_dim] = [q_abs | q_rope]; o_lat [T, H, C]; row pointers.
  const int64_t rows = T * H, K = plan.key_chunks;
  const int64_t part_bytes = static_cast<int64_t>(sizeof(fast::attention_partial));
  const int64_t split_bytes = K > 1 ? round_up(rows * K * part_bytes, 64) + round_up(rows * K * C * 4, 64)
                                    : 0;
  uint8_t* cursor = attn_buf_.get<uint8_t>(round_up(rows * kv_dim * 4, 64) + round_up(rows * C * 4, 64) +
                                           2 * round_up(rows * 8, 64) + split_bytes);
  auto take = [&](int64_t bytes) {
    uint8_t* at = cursor;
    cursor += round_up(bytes, 64);
    return at;
  };
  auto* qc = reinterpret_cast<float*>(take(rows * kv_dim * 4));
  auto* o_lat = reinterpret_cast<float*>(take(rows * C * 4));
  auto** q_nope = reinterpret_cast<const float**>(take(rows * 8));  // [H][T], head-major
  auto** lat_in = reinterpret_cast<const float**>(take(rows * 8));  // [H][T]
  // key chunks split over tasks: row (t, h)'s chunk c at parts[(t * H + h) * K + c]
  fast::attention_partial* parts = nullptr;
  if (K > 1) {
    parts = reinterpret_cast<fast::attention_partial*>(take(rows * K * part_bytes));
    auto* values = reinterpret_cast<float*>(take(rows * K * C * 4));
    for (int64_t i = 0; i < rows * K; ++i)
      parts[i] = {.o = values + i * C};
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t) {
      q_nope[h * T + t] = p.q + (t * H + h) * dq;
      lat_in[h * T + t] = o_lat + (t * H + h) * C;
    }
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(p.q + r * dq + dn, dr, qc + r * kv_dim + C);  // q_rope after q_abs

  // A. q_abs[t, h] = W_UK[h]^T q_nope[t, h], a task per head.
  pool_.parallel_for(H, [&](int64_t h, int thread) {
    const act_rows x{.num_rows = T, .k = dn, .f32 = q_nope + h * T};
    fast::linear_rows(x, ab.uk_t[h], 0, C, qc + h * kv_dim, H * kv_dim, scratch_[thread]);
  });

  // B. attention over (sequence, token block, head group[, key chunk]) tasks.
  pool_.parallel_for(static_cast<int64_t>(plan.blocks.size()) * plan.head_groups * K, [&](int64_t task,
                                                                                          int thread) {
    const int64_t chunk = task % K, bg = task / K;
    const auto& b = plan.blocks[bg / plan.head_groups];
    const int64_t h0 = (bg % plan.head_groups) * plan.head_group;
    const int64_t nh = std::min(plan.head_group, H - h0), n = b.count * nh;
    const int64_t* toks = plan.seq_tokens[b.seq].data() + b.first;
    fast::thread_scratch& s = scratch_[thread];
    auto* row = s.rows_b.get<query_row>(n);
    for (int64_t j = 0; j < b.count; ++j)
      for (int64_t h = 0; h < nh; ++h)
        row[j * nh + h] = {.q = qc + (toks[j] * H + h0 + h) * kv_dim,
                           .out = o_lat + (toks[j] * H + h0 + h) * C,
                           .pos = p.layout.positions[toks[j]]};
    if (K == 1) {
      fast::attend({.num_rows = n, .row = row}, fast::latent_keys(p.cache, p.layout.block_tables[b.seq], C),
                   p.softmax_scale, s);
      return;
    }
    auto* part = s.attn_ptrs.get<fast::attention_partial>(n);  // this chunk of each row
    for (int64_t j = 0; j < b.count; ++j)
      for (int64_t h = 0; h < nh; ++h)
        part[j * nh + h] = parts[(toks[j] * H + h0 + h) * K + chunk];
    fast::attend_chunk({.num_rows = n, .row = row},
                       fast::latent_keys(p.cache, p.layout.block_tables[b.seq], C), p.softmax_scale, chunk,
                       part, s);
    for (int64_t j = 0; j < b.count; ++j)
      for (int64_t h = 0; h < nh; ++h)
        parts[(toks[j] * H + h0 + h) * K + chunk] = part[j * nh + h];
  });

  // C. out[t, h] = W_UV[h] o_lat[t, h], a task per head (key chunks merged first, in order).
  pool_.parallel_for(H, [&](int64_t h, int thread) {
    if (K > 1)
      for (int64_t t = 0; t < T; ++t) {
        fast::attention_partial row{.o = o_lat + (t * H + h) * C, .max = 0.0f, .sum = 0.0f};
        for (int64_t c = 0; c < K; ++c)
          fast::merge_partial(row, parts[(t * H + h) * K + c], C);
        fast::finish_partial(row, C, row.o);
      }
    const act_rows x{.num_rows = T, .k = C, .f32 = lat_in + h * T};
    fast::linear_rows(x, ab.uv[h], 0, dv, p.out + h * dv, H * dv, scratch_[thread]);
  });
}

}  // namespace moe

MOE_FAST_TARGET_END
