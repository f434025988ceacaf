// tools/op_timing.hpp
// A backend that runs every op on another backend and times it (bench-model --op-times): where a
// decode step's or a prefill's time goes, op by op, and how fast each op reads its weights. Ops
// are told apart by kind and weight shape, so the small preset's q_a + kv_a group and its o_proj
// are separate lines. Timing costs two clock reads per op (~150 ops per small-preset token).
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "kernels/backend.hpp"

namespace moe::tools {

class op_timing_backend : public backend {
 public:
  /// Times ops run on `inner`, which must outlive this.
  explicit op_timing_backend(backend& inner) : inner_(inner) {}

  struct op_total {
    double seconds = 0.0;
    double weight_bytes = 0.0;  // weights (with FP8 block scales) the calls read
    int64_t calls = 0;
  };
  /// Totals per op label since construction or clear(): "linear 1024x1024 f8_e4m3",
  /// "linear_group 384x1024 f8_e4m3 + 160x1024 f8_e4m3", "moe_experts", "rms_norm", ...
  [[nodiscard]] const std::map<std::string, op_total>& totals() const noexcept { return totals_; }
  void clear() noexcept { totals_.clear(); }
  /// The totals per step over `steps` steps, slowest op first, to `out`; `unit` names a step
  /// in the header ("step": ms/step, MB/step).
  void print(std::FILE* out, int64_t steps, const char* unit = "step") const;

  [[nodiscard]] std::string_view name() const noexcept override { return inner_.name(); }
  [[nodiscard]] bool supports(op_kind op) const noexcept override { return inner_.supports(op); }
  void embedding(const embedding_params& p) override;
  void rms_norm(const rms_norm_params& p) override;
  void linear(const linear_params& p) override;
  void linear_group(const linear_group_params& p) override;
  void rope(const rope_params& p) override;
  void store_kv(const store_kv_params& p) override;
  void mla_attention(const mla_attention_params& p) override;
  void silu_mul(const silu_mul_params& p) override;
  void add(const add_params& p) override;
  void moe_gate(const moe_gate_params& p) override;
  void moe_experts(const moe_experts_params& p) override;

 private:
  template <class Fn>
  void timed(const std::string& label, double weight_bytes, Fn&& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    op_total& t = totals_[label];
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    t.weight_bytes += weight_bytes;
    ++t.calls;
  }

  backend& inner_;
  std::map<std::string, op_total> totals_;
};

}  // namespace moe::tools
