// tests/cuda/simt_emulator.hpp
// Runs a CUDA kernel body (kernels/cuda/simt.hpp policy) on the host: one std::thread per CUDA
// thread, a std::barrier for every shuffle and barrier, blocks one after another. Slow, but it
// executes the real index arithmetic, reductions and tie-breaking where no GPU exists.
// NOTE: warp barriers are block-wide here, so every warp of a block must reach the same number
// of shuffles and barriers (true of the bodies: their loop bounds do not depend on the token).
#pragma once

#include <barrier>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace moe::test {

class host_simt {
 public:
  host_simt(std::barrier<>& bar, std::vector<uint64_t>& slots, int thread)
      : bar_(bar), slots_(slots), thread_(thread) {}

  template <class T>
  T shfl_xor(T v, int lane_mask) const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    slots_[thread_] = bits;
    bar_.arrive_and_wait();
    bits = slots_[thread_ ^ lane_mask];
    bar_.arrive_and_wait();
    T out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  }
  void sync_warp() const { bar_.arrive_and_wait(); }
  void sync_block() const { bar_.arrive_and_wait(); }

 private:
  std::barrier<>& bar_;
  std::vector<uint64_t>& slots_;
  int thread_;
};

/// body(const host_simt&, int64_t block, int thread, float* shared) for every thread of every
/// block. Shared memory starts as NaN, so reading a value never written shows up in results.
/// One std::thread per CUDA thread runs all blocks in turn; each block has its own barrier,
/// shuffle slots and shared memory, so a thread may run ahead into the next block.
template <class Body>
void emulate_launch(int64_t blocks, int threads, int64_t shared_floats, Body body) {
  struct block_state {
    explicit block_state(int threads, int64_t shared_floats)
        : bar(threads), slots(static_cast<size_t>(threads)),
          shared(static_cast<size_t>(shared_floats), std::numeric_limits<float>::quiet_NaN()) {}
    std::barrier<> bar;
    std::vector<uint64_t> slots;
    std::vector<float> shared;
  };
  std::vector<std::unique_ptr<block_state>> state;
  for (int64_t b = 0; b < blocks; ++b)
    state.push_back(std::make_unique<block_state>(threads, shared_floats));
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t b = 0; b < blocks; ++b) {
        block_state& s = *state[static_cast<size_t>(b)];
        body(host_simt(s.bar, s.slots, t), b, t, s.shared.data());
        s.bar.arrive_and_drop();  // a thread that returned early stops counting
      }
    });
}

}  // namespace moe::test
