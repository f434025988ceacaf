// kernels/cuda/cuda_backend.hpp
// One CUDA device as a moe::backend. Implements rms_norm and moe_gate so far; every other op
// throws std::logic_error. Not thread-safe: one owner (one actor) per device.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace moe {

class cuda_backend : public backend {
 public:
  /// Creates a stream on `device`; throws std::runtime_error when the device is unusable.
  explicit cuda_backend(int device);
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }  // "cuda:N"
  [[nodiscard]] bool supports(op_kind op) const noexcept override;
  [[nodiscard]] int device() const noexcept { return device_; }

  void embedding(const embedding_params& p) override;
  void rms_norm(const rms_norm_params& p) override;
  void linear(const linear_params& p) override;
  void rope(const rope_params& p) override;
  void store_kv(const store_kv_params& p) override;
  void mla_attention(const mla_attention_params& p) override;
  void silu_mul(const silu_mul_params& p) override;
  void add(const add_params& p) override;
  void moe_gate(const moe_gate_params& p) override;
  void moe_experts(const moe_experts_params& p) override;

 private:
  /// Device scratch of at least `bytes`, grown (never shrunk) on demand.
  void* scratch(size_t bytes);

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

/// One backend per visible CUDA device; empty when cudaGetDeviceCount fails (no driver, as on
/// CPU-only machines: cudaErrorInsufficientDriver) or finds none. Throws std::runtime_error when
/// a visible device cannot be set up (see cuda_backend::cuda_backend).
[[nodiscard]] std::vector<std::unique_ptr<backend>> make_cuda_backends();

/// One line for logs and test skips: "no CUDA device: <error name> (<error string>)" or
/// "2 devices (runtime 13.0, driver 13.0): cuda:0 NVIDIA H200 sm_90 139.8 GiB, cuda:1 ...".
[[nodiscard]] std::string cuda_status();

namespace cuda {

/// The launchers on moe's op params (device pointers): convert to the C++17 argument structs
/// of kernels/cuda/launchers.hpp and launch on `stream`; no synchronisation.
void rms_norm(const rms_norm_params& p, cudaStream_t stream);
void moe_gate(const moe_gate_params& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace moe
