// kernels/cpu/fast_backend.hpp
// The fast CPU backend: the reference with its hot ops replaced by vectorised, multi-threaded
// kernels (AVX-512 with AVX512_BF16). Precision: activations are rounded to bf16 at matmul
// inputs for BF16 / FP8 weights (as DeepSeek does); accumulation is fp32; F32 / F16 weights and
// attention scores, softmax and the latent weighted sum stay fp32.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/reference_backend.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace moe {

struct attention_plan;  // kernels/cpu/fast_attention.cpp

/// kv_b_proj split per head for the absorbed form, dequantised once (BF16 for BF16 / FP8
/// weights, F32 for F32 / F16): W_UK[h]^T [C, dn] and W_UV[h] [dv, C] as linear weights.
/// Cached per kv_b_proj data pointer; `fingerprint` (shape, dtype, sampled bytes) guards against
/// another weight later living at the same address.
struct absorbed_kv_b {
  uint64_t fingerprint = 0;
  // [H, C, dn] then [H, dv, C]: FP8 codes in panels with their block scales (an FP8 kv_b whose
  // scale blocks align with the heads: exact, half the bytes of bf16), else bf16 (rounded), or
  // f32 for F32 / F16 weights
  std::vector<uint8_t> fp8;
  std::vector<float> fp8_scales;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
  std::shared_ptr<void> panels;     // bf16: uk_t and uv packed for the GEMM (gemm_panels)
  std::vector<linear_weight> uk_t;  // [H] -> [C, dn]
  std::vector<linear_weight> uv;    // [H] -> [dv, C]
};

/// The (token, k) slots of one moe_experts call grouped by expert: a stable counting sort, so
/// expert e's slots sit at positions offsets[e] .. offsets[e + 1] in slot order.
struct expert_grouping {
  std::vector<int64_t> offsets;   // [E + 1], E = expert_end - expert_begin
  std::vector<int64_t> pos_slot;  // [P] position -> slot t * K + k
  std::vector<int64_t> slot_pos;  // [T * K] slot -> position; -1 outside the range
  std::vector<int64_t> active;    // experts with slots, most slots first
  std::vector<int64_t> fill;      // scratch
};
void group_by_expert(const moe_experts_params& p, expert_grouping& g);  // fast_experts.cpp

/// One piece of a GEMV task: rows [r0, r0 + num_rows) of weight `weight`.
struct gemv_piece {
  int64_t task = 0, weight = 0, r0 = 0, num_rows = 0;
};
/// The weights' rows cut into tasks of whole granules (64 rows, a panel, when any weight is BF16
/// or FP8, else 16; a weight's last granule may be short), each weight's granules in turn: as many
/// tasks as threads, each >= 64 KiB where the bytes allow, every task holding
/// the same number of granules or one more (the larger first). A task that crosses from one
/// weight into the next holds a piece of each. Pieces come in task order.
[[nodiscard]] std::vector<gemv_piece> plan_gemv(std::span<const linear_weight* const> w, int threads);

class cpu_fast_backend : public cpu_reference_backend {
 public:
  /// num_threads <= 0: every hardware thread; `cpus`: where the pool's workers pin themselves
  /// (thread_pool), empty: where the OS puts them.
  explicit cpu_fast_backend(int num_threads, std::vector<int> cpus = {});

  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  void linear(const linear_params& p) override;  // kernels/cpu/fast_backend.cpp
  void linear_group(const linear_group_params& p) override;
  void moe_experts(const moe_experts_params& p) override;      // kernels/cpu/fast_experts.cpp
  void mla_attention(const mla_attention_params& p) override;  // kernels/cpu/fast_attention.cpp
  void embedding(const embedding_params& p) override;          // kernels/cpu/fast_elementwise.cpp
  void rms_norm(const rms_norm_params& p) override;
  void rope(const rope_params& p) override;
  void silu_mul(const silu_mul_params& p) override;
  void add(const add_params& p) override;
  void moe_gate(const moe_gate_params& p) override;

  [[nodiscard]] int num_threads() const noexcept { return pool_.size(); }
  /// The kernels' own threads, for work measured beside them (bench-model's paired read): a
  /// second pool would spin on the same cores while this one starts.
  [[nodiscard]] thread_pool& pool() noexcept { return pool_; }

  /// kv_b_proj of `p` absorbed per head (built on first use per weight, then cached); public for
  /// tests.
  [[nodiscard]] const absorbed_kv_b& absorbed(const mla_attention_params& p);

 private:
  /// Runs fn(begin, end) over [0, n) split across the pool when n * cost is large.
  template <class Fn>
  void split(int64_t n, int64_t cost, Fn&& fn);
  /// Activation rows f32[0 .. m) (w.in_features floats each) as the kernels read them for `w`:
  /// rounded once here for every task when the GEMM takes them (uses x_fma_ / x_bf16_).
  [[nodiscard]] fast::act_rows gemm_input(const float* const* f32, int64_t m, const linear_weight& w);
  /// Runs `linear_rows` for rows [0, w.out_features) of y = x @ w^T over the pool.
  void parallel_linear(const fast::act_rows& x, const linear_weight& w, float* out, int64_t ldo);
  /// GEMV rows of every weight in one dispatch (plan_gemv); out[i] has row stride ldo, or
  /// w[i]->out_features when ldo is 0.
  void parallel_gemv(const fast::act_rows& x, std::span<const linear_weight* const> w,
                     std::span<float* const> out, int64_t ldo);
  void attention_absorbed(const mla_attention_params& p);
  void attention_naive(const mla_attention_params& p);
  void attention_fused(const mla_attention_params& p, const absorbed_kv_b& ab, const attention_plan& plan);
  void attention_phased(const mla_attention_params& p, const absorbed_kv_b& ab, const attention_plan& plan);

  thread_pool pool_;
  std::vector<fast::thread_scratch> scratch_;  // one per pool thread
  // Per-call buffers, kept to avoid reallocating on every op (one caller at a time).
  fast::scratch_buffer x_bf16_, x_ptrs_, x_bf16_ptrs_, x_fma_, x_fma_ptrs_, moe_buf_, attn_buf_, naive_buf_;
  expert_grouping grouping_;
  std::mutex cache_mutex_;
  std::unordered_map<const void*, std::unique_ptr<absorbed_kv_b>> absorbed_;
};

template <class Fn>
void cpu_fast_backend::split(int64_t n, int64_t cost, Fn&& fn) {
  constexpr int64_t min_parallel_cost = 1 << 15;  // below this a dispatch costs more than it saves
  if (n * cost < min_parallel_cost || n < 2) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t pieces = std::min<int64_t>(n, 4 * pool_.size()), step = (n + pieces - 1) / pieces;
  pool_.parallel_for((n + step - 1) / step,
                     [&](int64_t task, int) { fn(task * step, std::min(n, (task + 1) * step)); });
}

}  // namespace moe
