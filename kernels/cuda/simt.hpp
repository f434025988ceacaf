// kernels/cuda/simt.hpp
// The few SIMT primitives the kernel bodies use (warp shuffles, warp and block barriers), behind
// a policy type so the same body runs on the GPU (device_simt, below) and in a host emulation
// with one std::thread per CUDA thread (tests/cuda/simt_emulator.hpp). The emulation lets CI
// without a GPU execute the kernels' index arithmetic, reductions and tie-breaking.
// C++17, no project headers.
#pragma once

#if defined(__CUDACC__)
#  define MOE_SIMT_FN __device__ __forceinline__
#else
#  define MOE_SIMT_FN inline
#endif

namespace moe::cuda {

inline constexpr int warp_size = 32;

#if defined(__CUDACC__)
/// The real thing. Every shuffle and barrier must be reached by all lanes of the warp (block).
struct device_simt {
  template <class T>
  __device__ T shfl_xor(T v, int lane_mask) const {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
  }
  __device__ void sync_warp() const { __syncwarp(); }
  __device__ void sync_block() const { __syncthreads(); }
};
#endif

/// Sum over the warp, left in every lane. Butterfly: partners add the same two values, and
/// float addition commutes, so every lane holds the bitwise-same result.
template <class Simt>
MOE_SIMT_FN float warp_sum(const Simt& simt, float v) {
  for (int m = warp_size / 2; m > 0; m /= 2)
    v += simt.shfl_xor(v, m);
  return v;
}

/// Sum over a block of `num_threads` (a multiple of 32), left in every thread. `partials` is
/// shared memory for num_threads / 32 floats; every thread adds the warp partials in the same
/// order, so all agree. Called once per block (a second call would need a barrier first).
template <class Simt>
MOE_SIMT_FN float block_sum(const Simt& simt, float v, int thread, int num_threads, float* partials) {
  v = warp_sum(simt, v);
  if (thread % warp_size == 0)
    partials[thread / warp_size] = v;
  simt.sync_block();
  float total = 0.0f;
  for (int w = 0; w < num_threads / warp_size; ++w)
    total += partials[w];
  return total;
}

/// Arg-max over the warp, left in every lane: the largest value, ties to the lower index.
/// (-inf, INT_MAX) is the identity, so a lane without candidates starts from it.
template <class Simt>
MOE_SIMT_FN void warp_best(const Simt& simt, float& value, int& index) {
  for (int m = warp_size / 2; m > 0; m /= 2) {
    const float other_value = simt.shfl_xor(value, m);
    const int other_index = simt.shfl_xor(index, m);
    if (other_value > value || (other_value == value && other_index < index)) {
      value = other_value;
      index = other_index;
    }
  }
}

}  // namespace moe::cuda
