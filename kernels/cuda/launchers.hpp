// kernels/cuda/launchers.hpp
// Kernel launchers on device pointers: each checks its arguments (throwing
// std::invalid_argument), launches on `stream` and checks the launch; none synchronises.
// The kernels trust what the launcher checked. C++17, no project headers.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/moe_gate.hpp"
#include "kernels/cuda/norm.hpp"

namespace moe::cuda {

/// RMSNorm, one block per row (kernels/cuda/norm.cu).
void rms_norm(const rms_norm_args& a, cudaStream_t stream);
/// The noaux_tc router, one warp per token (kernels/cuda/moe_gate.cu).
void moe_gate(const moe_gate_args& a, cudaStream_t stream);

}  // namespace moe::cuda
