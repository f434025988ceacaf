// kernels/cuda/norm.cu
// RMSNorm (model-spec 5.2): one block per row, fp32, warp-shuffle then cross-warp reduction.
// The body is rms_norm_row in norm.hpp; x: rows of dim, stride apart -> out, same layout.
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launchers.hpp"

namespace moe::cuda {
namespace {

__global__ void rms_norm_kernel(const rms_norm_args a) {
  __shared__ float partials[rms_norm_max_threads / warp_size];
  rms_norm_row(device_simt{}, a, blockIdx.x, threadIdx.x, blockDim.x, partials);
}

void require(bool ok, const char* what) {
  if (!ok)
    throw std::invalid_argument(std::string("cuda rms_norm: ") + what);
}

}  // namespace

void rms_norm(const rms_norm_args& a, cudaStream_t stream) {
  require(a.num_tokens >= 0 && a.num_tokens <= INT32_MAX, "num_tokens must be in [0, 2^31)");
  if (a.num_tokens == 0)
    return;
  require(a.dim > 0 && a.dim <= INT32_MAX, "dim must be in [1, 2^31)");
  require(a.stride == 0 || a.stride >= a.dim, "stride must be 0 or >= dim");
  require(a.x != nullptr && a.weight != nullptr && a.out != nullptr, "null pointer");
  const int threads = rms_norm_threads(a.dim);
  rms_norm_kernel<<<static_cast<unsigned>(a.num_tokens), threads, 0, stream>>>(a);
  MOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe::cuda
