// kernels/checkpoint/tensor_pass.cpp
// Parallel passes over a file's tensors, and the scan for NaN and infinite values.
#include "kernels/checkpoint/tensor_pass.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

namespace moe {
namespace {

// The index of the first element of `n` whose bits b have (b & mask) == mask (an all-ones
// exponent: NaN or infinity; e4m3: the NaN codes), or -1. Blocks are copied out first (tensor
// data need not be aligned to its element size) and tested without an early exit, so the test
// vectorises; only a block that holds one is searched element by element.
template <class U>
int64_t first_all_ones(const std::byte* data, int64_t n, U mask) {
  constexpr int64_t block = 4096 / sizeof(U);
  U buf[block];
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t m = std::min(block, n - i0);
    std::memcpy(buf, data + i0 * static_cast<int64_t>(sizeof(U)), static_cast<size_t>(m) * sizeof(U));
    unsigned hits = 0;
    for (int64_t i = 0; i < m; ++i)
      hits += (buf[i] & mask) == mask ? 1u : 0u;
    if (hits != 0)
      for (int64_t i = 0; i < m; ++i)
        if ((buf[i] & mask) == mask)
          return i0 + i;
  }
  return -1;
}

}  // namespace

void for_each_tensor_parallel(const std::vector<tensor_info*>& todo,
                              const std::function<void(tensor_info&)>& fn) {
  std::vector<std::exception_ptr> errors(todo.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      try {
        fn(*todo[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t helpers = todo.empty() ? 0 : std::min(todo.size(), cores) - 1;
  std::vector<std::thread> threads;
  for (size_t h = 0; h < helpers; ++h)
    threads.emplace_back(work);
  work();
  for (auto& th : threads)
    th.join();
  for (const std::exception_ptr& e : errors)
    if (e)
      std::rethrow_exception(e);
}

void check_finite(const tensor_info& t) {
  const int64_t size = dtype_size(t.type), n = size > 0 ? t.num_bytes / size : 0;
  int64_t bad = -1;
  switch (t.type) {
    case dtype::f32: bad = first_all_ones<uint32_t>(t.data, n, 0x7f800000u); break;
    case dtype::f16: bad = first_all_ones<uint16_t>(t.data, n, 0x7c00); break;
    case dtype::bf16: bad = first_all_ones<uint16_t>(t.data, n, 0x7f80); break;
    case dtype::f8_e4m3: bad = first_all_ones<uint8_t>(t.data, n, 0x7f); break;
    default: return;
  }
  if (bad < 0)
    return;
  std::string where = "element " + std::to_string(bad);
  if (t.shape.size() == 2 && t.shape[1] > 0)
    where += " [" + std::to_string(bad / t.shape[1]) + ", " + std::to_string(bad % t.shape[1]) + "]";
  char value[64];
  if (t.type == dtype::f8_e4m3) {
    std::snprintf(value, sizeof value, "NaN (F8_E4M3 code 0x%02x)", static_cast<unsigned>(t.data[bad]));
  } else {
    uint32_t bits = 0;
    std::memcpy(&bits, t.data + bad * size, static_cast<size_t>(size));
    const float v = t.type == dtype::f32    ? std::bit_cast<float>(bits)
                    : t.type == dtype::bf16 ? bf16_to_f32(static_cast<uint16_t>(bits))
                                            : f16_to_f32(static_cast<uint16_t>(bits));
    std::snprintf(value, sizeof value, "%s", std::isnan(v) ? "NaN" : v > 0 ? "+infinity" : "-infinity");
  }
  throw input_error(t.file + ": tensor \"" + t.name + "\": " + where + " is " + value +
                    " (expected a finite number)");
}

}  // namespace moe
