// kernels/cpu/backends.cpp
// Which backends exist here: the CPU reference always, CUDA devices when built and present.
#include <cstdio>

#include "kernels/cpu/reference_backend.hpp"
#ifdef MOE_HAVE_CUDA
#  include "kernels/cuda/cuda_backend.hpp"
#endif

namespace moe {

std::unique_ptr<backend> make_cpu_reference_backend() { return std::make_unique<cpu_reference_backend>(); }

bool cpu_fast_path_supported() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("gfni");
}

std::unique_ptr<backend> make_cpu_backend(bool reference, int num_threads, std::vector<int> cpus) {
  if (reference)
    return make_cpu_reference_backend();
  if (cpu_fast_path_supported())
    return make_cpu_fast_backend(num_threads, std::move(cpus));
  std::fprintf(stderr,
               "warning: this CPU lacks AVX-512 BF16, VBMI or GFNI; using the (slow) reference backend\n");
  return make_cpu_reference_backend();
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
