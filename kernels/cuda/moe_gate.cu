// kernels/cuda/moe_gate.cu
// The noaux_tc router (model-spec 5.7): one warp per token, up to 4 tokens per block, scores in
// shared memory. The body is moe_gate_token in moe_gate.hpp.
// logits: [num_tokens, num_experts] -> topk_ids, topk_weights: [num_tokens, top_k]
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launchers.hpp"

namespace moe::cuda {
namespace {

__global__ void moe_gate_kernel(const moe_gate_args a, int warps_per_block) {
  extern __shared__ float smem[];
  moe_gate_block(device_simt{}, a, blockIdx.x, threadIdx.x, warps_per_block, smem);
}

void require(bool ok, const char* what) {
  if (!ok)
    throw std::invalid_argument(std::string("cuda moe_gate: ") + what);
}

}  // namespace

void moe_gate(const moe_gate_args& a, cudaStream_t stream) {
  require(a.num_tokens >= 0, "num_tokens must be >= 0");
  if (a.num_tokens == 0)
    return;
  require(a.num_experts > 0 && a.num_experts <= moe_gate_max_experts, "num_experts must be in [1, 2048]");
  require(a.num_groups > 0 && a.num_experts % a.num_groups == 0, "num_groups must divide num_experts");
  require(a.topk_group >= 1 && a.topk_group <= a.num_groups, "topk_group must be in [1, num_groups]");
  require(a.top_k >= 1 && a.top_k <= a.topk_group * (a.num_experts / a.num_groups),
          "top_k must be in [1, experts in the kept groups]");
  require(a.logits != nullptr && a.topk_ids != nullptr && a.topk_weights != nullptr, "null pointer");
  const int warps = moe_gate_warps_per_block(a.num_experts, a.num_groups);
  const int64_t blocks = (a.num_tokens + warps - 1) / warps;
  require(blocks <= INT32_MAX, "num_tokens too large");
  const size_t smem = sizeof(float) *
                      static_cast<size_t>(warps * moe_gate_smem_floats_per_warp(a.num_experts, a.num_groups));
  moe_gate_kernel<<<static_cast<unsigned>(blocks), warps * warp_size, smem, stream>>>(a, warps);
  MOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
