// kernels/cuda/check.hpp
// Error checks for CUDA host code: runtime-API failures and launcher preconditions both throw,
// naming the file, line and what failed. C++17 and no project headers: .cu files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace moe::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " -> " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace moe::cuda

/// Throws std::runtime_error when a CUDA runtime call fails.
#define MOE_CUDA_CHECK(expr)                                                   \
  do {                                                                         \
    const cudaError_t moe_cuda_err_ = (expr);                                  \
    if (moe_cuda_err_ != cudaSuccess)                                          \
      ::moe::cuda::throw_cuda_error(moe_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)
