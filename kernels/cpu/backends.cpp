// kernels/cpu/backends.cpp
// Which backends exist here: the CPU reference always, CUDA devices when built and present.
#include "kernels/cpu/reference_backend.hpp"
#ifdef MOE_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#endif

namespace moe {

std::unique_ptr<backend> make_cpu_reference_backend() {
  return std::make_unique<cpu_reference_backend>();
}

std::vector<std::unique_ptr<backend>> available_backends() {
  std::vector<std::unique_ptr<backend>> all;
  all.push_back(make_cpu_reference_backend());
#ifdef MOE_HAVE_CUDA
  for (auto& device : make_cuda_backends())
    all.push_back(std::move(device));
#endif
  return all;
}

}  // namespace moe
