// tests/cuda/test_cuda_emulated.cpp
// The CUDA kernel bodies (kernels/cuda/norm.hpp, moe_gate.hpp) run on the host through the SIMT
// emulator, with the launchers' launch shapes, against the CPU reference. Needs no GPU and no
// CUDA toolkit, so the kernels' logic is tested in every build.
#include <doctest/doctest.h>

#include <stdexcept>

#include "cuda/cases.hpp"
#include "cuda/simt_emulator.hpp"
#include "kernels/cuda/moe_gate.hpp"
#include "kernels/cuda/norm.hpp"

namespace moe::test {
namespace {

/// rms_norm and moe_gate as the CUDA launchers would run them, emulated; other ops throw.
class emulated_cuda_backend : public backend {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "cuda-emulated"; }
  [[nodiscard]] bool supports(op_kind op) const noexcept override {
    return op == op_kind::rms_norm || op == op_kind::moe_gate;
  }
  void rms_norm(const rms_norm_params& p) override {
    const cuda::rms_norm_args a{p.x, p.weight, p.out, p.num_tokens, p.dim, p.stride, p.eps};
    const int threads = cuda::rms_norm_threads(a.dim);
    emulate_launch(a.num_tokens, threads, threads / cuda::warp_size,
                   [&](const host_simt& simt, int64_t block, int thread, float* shared) {
                     cuda::rms_norm_row(simt, a, block, thread, threads, shared);
                   });
  }
  void moe_gate(const moe_gate_params& p) override {
    const cuda::moe_gate_args a{
      p.logits,     p.bias,       p.topk_ids, p.topk_weights,   p.num_tokens,           p.num_experts,
      p.num_groups, p.topk_group, p.top_k,    p.norm_topk_prob, p.routed_scaling_factor};
    const int warps = cuda::moe_gate_warps_per_block(a.num_experts, a.num_groups);
    emulate_launch((a.num_tokens + warps - 1) / warps, warps * cuda::warp_size,
                   warps * cuda::moe_gate_smem_floats_per_warp(a.num_experts, a.num_groups),
                   [&](const host_simt& simt, int64_t block, int thread, float* shared) {
                     cuda::moe_gate_block(simt, a, block, thread, warps, shared);
                   });
  }
  void embedding(const embedding_params&) override { unsupported(); }
  void linear(const linear_params&) override { unsupported(); }
  void rope(const rope_params&) override { unsupported(); }
  void store_kv(const store_kv_params&) override { unsupported(); }
  void mla_attention(const mla_attention_params&) override { unsupported(); }
  void silu_mul(const silu_mul_params&) override { unsupported(); }
  void add(const add_params&) override { unsupported(); }
  void moe_experts(const moe_experts_params&) override { unsupported(); }

 private:
  [[noreturn]] static void unsupported() { throw std::logic_error("not emulated"); }
};

}  // namespace

TEST_CASE("emulated kernels: launch shapes") {
  CHECK(cuda::rms_norm_threads(1) == 32);
  CHECK(cuda::rms_norm_threads(64) == 32);
  CHECK(cuda::rms_norm_threads(7168) == 896);
  CHECK(cuda::rms_norm_threads(1 << 20) == 1024);
  CHECK(cuda::moe_gate_warps_per_block(256, 8) == 4);
  CHECK(cuda::moe_gate_warps_per_block(2048, 1) == 2);  // 16 KiB a warp
}

TEST_CASE("emulated kernels: rms_norm matches the CPU reference") {
  const auto ref = make_cpu_reference_backend();
  emulated_cuda_backend emu;
  struct shape {
    int64_t tokens, dim, stride;
  };
  for (const shape s : {shape{1, 7168, 0}, shape{2, 7168, 0}, shape{5, 64, 80}, shape{4, 1000, 1003},
                        shape{2, 1536, 0}, shape{3, 7, 0}}) {
    CAPTURE(s.tokens);
    CAPTURE(s.dim);
    CAPTURE(s.stride);
    const norm_case c = make_norm_case(s.tokens, s.dim, s.stride, 7);
    for (const bool in_place : {false, true}) {
      CAPTURE(in_place);
      check_norm_close(c, run_norm(emu, c, in_place), run_norm(*ref, c, in_place));
    }
  }
}

TEST_CASE("emulated kernels: moe_gate matches the CPU reference") {
  const auto ref = make_cpu_reference_backend();
  emulated_cuda_backend emu;
  for (const int64_t tokens : {1, 2, 5, 13, 40}) {
    CAPTURE(tokens);
    const gate_case c = make_v3_gate_case(tokens, static_cast<uint32_t>(100 + tokens));
    const gate_result got = run_gate(emu, c);
    check_gate_close(c, got, run_gate(*ref, c));
    check_gate_order(c, got);
  }
}

TEST_CASE("emulated kernels: moe_gate variants match the CPU reference") {
  const auto ref = make_cpu_reference_backend();
  emulated_cuda_backend emu;
  gate_case c = make_v3_gate_case(9, 5);
  SUBCASE("no bias") { c.bias.clear(); }
  SUBCASE("one group") {
    c.groups = 1;
    c.topk_group = 1;
  }
  SUBCASE("all groups kept, top_k 1") {
    c.topk_group = c.groups;
    c.top_k = 1;
  }
  SUBCASE("no normalisation") { c.norm = false; }
  SUBCASE("ties: repeated logits") {
    for (size_t i = 0; i < c.logits.size(); ++i)
      c.logits[i] = static_cast<float>(static_cast<int>(i * 7 % 5)) * 0.5f;
    c.bias.assign(c.bias.size(), 0.0f);
  }
  check_gate_close(c, run_gate(emu, c), run_gate(*ref, c));
}

TEST_CASE("emulated kernels: moe_gate reproduces the spec's worked example") {
  emulated_cuda_backend emu;
  const gate_case c = spec_gate_case();
  const gate_result r = run_gate(emu, c);
  check_spec_gate(r);
  CHECK(r.ids == std::vector<int32_t>{3, 2});  // biased score descending
}

}  // namespace moe::test
