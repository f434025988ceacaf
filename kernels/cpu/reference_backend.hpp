// kernels/cpu/reference_backend.hpp
// The CPU reference backend: every op as plain loops over fp32 activations, weights dequantised
// element by element, fp32 accumulation. It is the specification the other backends match.
#pragma once

#include "kernels/backend.hpp"

namespace moe {

class cpu_reference_backend : public backend {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "cpu-ref"; }
  [[nodiscard]] bool supports(op_kind) const noexcept override { return true; }
  void embedding(const embedding_params& p) override;          // kernels/cpu/embedding.cpp
  void rms_norm(const rms_norm_params& p) override;            // kernels/cpu/norm.cpp
  void linear(const linear_params& p) override;                // kernels/cpu/linear.cpp
  void rope(const rope_params& p) override;                    // kernels/cpu/rope.cpp
  void store_kv(const store_kv_params& p) override;            // kernels/cpu/attention.cpp
  void mla_attention(const mla_attention_params& p) override;  // kernels/cpu/attention.cpp
  void silu_mul(const silu_mul_params& p) override;            // kernels/cpu/activation.cpp
  void add(const add_params& p) override;                      // kernels/cpu/activation.cpp
  void moe_gate(const moe_gate_params& p) override;            // kernels/cpu/moe_gate.cpp
  void moe_experts(const moe_experts_params& p) override;      // kernels/cpu/moe_experts.cpp
};

}  // namespace moe
