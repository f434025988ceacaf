// kernels/cpu/fast_backend.cpp
// The fast CPU backend's construction and its linear ops: the rows of W split into tasks over the
// thread pool (up to gemv_max_rows activation rows: equal chunks of rows, across the weights of a
// linear_group; more: 64-row panels x activation row ranges).
#include "kernels/cpu/fast_backend.hpp"

#include <algorithm>
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe {

using fast::act_rows;
using fast::round_up;

cpu_fast_backend::cpu_fast_backend(int num_threads, std::vector<int> cpus)
    : pool_(num_threads, std::move(cpus)), scratch_(static_cast<size_t>(pool_.size())) {}

std::unique_ptr<backend> make_cpu_fast_backend(int num_threads, std::vector<int> cpus) {
  return std::make_unique<cpu_fast_backend>(num_threads, std::move(cpus));
}

void cpu_fast_backend::parallel_linear(const act_rows& x, const linear_weight& w, float* out, int64_t ldo) {
  const int64_t n = w.out_features, threads = pool_.size();
  if (x.num_rows <= fast::gemv_max_rows) {  // GEMV-sized, whichever kernel: long row ranges
    // (one task per 64-row panel would restart the weight stream every panel)
    const linear_weight* ws[] = {&w};
    float* outs[] = {out};
    return parallel_gemv(x, ws, outs, ldo);
  }
  // Tasks: panel-aligned row ranges x activation row ranges of at least 48 rows, enough of
  // them to balance the threads; each task packs its panels once for all its rows.
  const int64_t span = fast::panel_rows;
  const int64_t num_spans = (n + span - 1) / span;
  const int64_t max_m_chunks = std::max<int64_t>(1, x.num_rows / 48);
  const int64_t m_chunks = std::clamp<int64_t>((4 * threads + num_spans - 1) / num_spans, 1, max_m_chunks);
  const int64_t m_chunk = round_up((x.num_rows + m_chunks - 1) / m_chunks, 6);
  const int64_t num_m = (x.num_rows + m_chunk - 1) / m_chunk;
  pool_.parallel_for(num_spans * num_m, [&](int64_t task, int thread) {
    const int64_t p = task / num_m, m0 = (task % num_m) * m_chunk;
    const act_rows part{.num_rows = std::min(m_chunk, x.num_rows - m0),
                        .k = x.k,
                        .f32 = x.f32 + m0,
                        .bf16 = x.bf16 ? x.bf16 + m0 : nullptr,
                        .fma = x.fma ? x.fma + m0 : nullptr,
                        .factor = x.factor};
    const int64_t r0 = p * span;
    fast::linear_rows(part, w, r0, std::min(span, n - r0), out + m0 * ldo + r0, ldo, scratch_[thread]);
  });
}

std::vector<gemv_piece> plan_gemv(std::span<const linear_weight* const> w, int threads) {
  // Chunks of >= 64 KiB (long streams, few restarts; measured: 256 x 1024 BF16 26 -> 37 GB/s
  // against 16-row chunks), as many as threads: a stream's rate grows with its length (a plain
  // read of random 64 KiB / 256 KiB / 1 MiB spans on the AMD VM's two threads: 29-32 / 37-42 /
  // 46 GB/s, one long stream 49-59), and the claiming pool already lets the caller take a late
  // worker's task. Two chunks per thread, as until session 24, decoded 6 % slower at batch 1
  // (FP8-32000: 267-318 -> 284-347 tok/s, BF16-32000 206-216 -> 219-232, six and three rounds
  // alternated) and 1.5-4 % slower at batch 8 and 32. In whole 64-row panels where a weight is
  // BF16 or FP8: the panel kernel and the GEMM compute a panel's 64 rows at once, so a cut
  // inside one would have both tasks read it (q_a + kv_a of the small preset: 144-row chunks
  // read 2 of q_a's 6 panels twice), and a BF16 panel packed ahead is only read as a whole.
  // Granules are dealt out evenly rather than rounded up per task: 256 x 1024 FP8 in ~2 chunks
  // per thread of >= 64 KiB was once 80 + 80 + 80 + 16 rows, 160 rows on one thread.
  int64_t bytes = 0, granule = 16;
  for (const linear_weight* x : w) {
    bytes += x->num_bytes();
    if (x->type == dtype::bf16 || x->type == dtype::f8_e4m3)
      granule = fp8_panel_rows;
  }
  int64_t granules = 0;
  for (const linear_weight* x : w)
    granules += (x->out_features + granule - 1) / granule;
  if (granules == 0)
    return {};
  const int64_t chunks = std::min(std::clamp<int64_t>(bytes >> 16, 1, threads), granules);
  auto share = [&](int64_t task) { return granules / chunks + (task < granules % chunks ? 1 : 0); };
  std::vector<gemv_piece> pieces;
  int64_t task = 0, left = share(0);  // granules the current task still takes
  for (size_t i = 0; i < w.size(); ++i)
    for (int64_t r0 = 0; r0 < w[i]->out_features;) {
      const int64_t avail = (w[i]->out_features - r0 + granule - 1) / granule;
      const int64_t take = std::min(left, avail);
      const int64_t nr = std::min(take * granule, w[i]->out_features - r0);
      pieces.push_back({.task = task, .weight = static_cast<int64_t>(i), .r0 = r0, .num_rows = nr});
      r0 += nr;
      left -= take;
      if (left == 0) {
        ++task;
        left = share(task);
      }
    }
  return pieces;
}

void cpu_fast_backend::parallel_gemv(const act_rows& x, std::span<const linear_weight* const> w,
                                     std::span<float* const> out, int64_t ldo) {
  const std::vector<gemv_piece> pieces = plan_gemv(w, pool_.size());
  if (pieces.empty())  // no rows at all
    return;
  // a task's pieces are adjacent: find its first by binary search on the task index
  pool_.parallel_for(pieces.back().task + 1, [&](int64_t task, int thread) {
    auto it = std::lower_bound(pieces.begin(), pieces.end(), task,
                               [](const gemv_piece& p, int64_t t) { return p.task < t; });
    for (; it != pieces.end() && it->task == task; ++it) {
      const linear_weight& wi = *w[it->weight];
      const int64_t ld = ldo > 0 ? ldo : wi.out_features;
      fast::linear_rows(x, wi, it->r0, it->num_rows, out[it->weight] + it->r0, ld, scratch_[thread]);
    }
  });
}

// x: [num_tokens, in] -> out: [num_tokens, out]
void cpu_fast_backend::linear(const linear_params& p) {
  const linear_weight& w = *p.w;
  if (!fast::fast_supports(w)) {
    cpu_reference_backend::linear(p);
    return;
  }
  const int64_t m = p.num_tokens, k = w.in_features;
  if (m == 0)
    return;
  auto** f32 = x_ptrs_.get<const float*>(m);
  for (int64_t t = 0; t < m; ++t)
    f32[t] = p.x + t * k;
  parallel_linear(gemm_input(f32, m, w), w, p.out, w.out_features);
}

act_rows cpu_fast_backend::gemm_input(const float* const* f32, int64_t m, const linear_weight& w) {
  const int64_t k = w.in_features;
  act_rows x{.num_rows = m, .k = k, .f32 = f32, .factor = fast::act_factor(w)};
  if (fast::uses_gemm(w, m) && (w.type == dtype::bf16 || w.type == dtype::f8_e4m3)) {
    // the activations rounded once for every task, as the kernels read them (fast_linear.hpp)
    auto convert = [&]<class T>(fast::scratch_buffer& buf, fast::scratch_buffer& ptrs, int64_t lda,
                                void (*row)(const float*, int64_t, T*, float)) {
      auto* rows = buf.get<T>(m * lda);
      auto** out = ptrs.get<const T*>(m);
      pool_.parallel_for((m + 15) / 16, [&](int64_t task, int) {
        for (int64_t t = task * 16; t < std::min(m, task * 16 + 16); ++t) {
          row(f32[t], k, rows + t * lda, x.factor);
          out[t] = rows + t * lda;
        }
      });
      return static_cast<const T* const*>(out);
    };
    if (m >= fast::fma_min_rows)
      x.fma = convert(x_fma_, x_fma_ptrs_, round_up(k, 16), fast::f32_row_to_fma_pairs);
    else
      x.bf16 = convert(x_bf16_, x_bf16_ptrs_, round_up(k, 32), fast::f32_row_to_bf16);
  }
  return x;
}

// A GEMV-sized group (<= gemv_max_rows rows; for BF16 and row-major FP8 weights the GEMM's tile
// does it) streams every weight's rows in one dispatch; more rows (compute-bound) keep one
// dispatch per weight.
void cpu_fast_backend::linear_group(const linear_group_params& p) {
  check_linear_group(p);
  const int64_t m = p.num_tokens;
  const bool one_pass = !p.w.empty() && m <= fast::gemv_max_rows &&
                        std::all_of(p.w.begin(), p.w.end(),
                                    [](const linear_weight* w) { return fast::fast_supports(*w); });
  if (!one_pass || m == 0)
    return backend::linear_group(p);
  const int64_t k = p.w.front()->in_features;
  auto** f32 = x_ptrs_.get<const float*>(m);
  for (int64_t t = 0; t < m; ++t)
    f32[t] = p.x + t * k;
  parallel_gemv({.num_rows = m, .k = k, .f32 = f32}, p.w, p.out, 0);
}

}  // namespace moe

MOE_FAST_TARGET_END
