// tools/machine_peaks.cpp
#include "tools/machine_peaks.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "kernels/cpu/fast_simd.hpp"  // the AVX-512 intrinsics
#include "kernels/cpu/thread_pool.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::tools {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// `iterations` x 12 of the op into 12 accumulators held in registers (an asm barrier on the
// accumulators themselves would spill them every iteration); their sum, for the caller to keep.
template <peak_op Op>
float peak_loop(int64_t iterations, int t) {
  __m512 acc[12];
  for (auto& a : acc)
    a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80 + t);  // pairs of ~1.0
  __m512 y = _mm512_set1_ps(1.0f + 1e-7f * static_cast<float>(t));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (auto& a : acc)
      a = Op == peak_op::vdpbf16ps ? _mm512_dpbf16_ps(a, x, x) : _mm512_fmadd_ps(y, y, a);
    asm volatile("" : "+v"(x), "+v"(y));  // opaque inputs: nothing folds or hoists
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i)
    sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

double measure_read_bandwidth(int threads) {
  constexpr int64_t bytes = int64_t{1} << 30;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  thread_pool pool(threads);
  const int64_t num_tasks = 256, chunk = bytes / num_tasks;
  pool.parallel_for(num_tasks, [&](int64_t t, int) {  // distinct, non-zero pages
    uint64_t s = static_cast<uint64_t>(t) * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < chunk; i += 8) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      std::memcpy(data + t * chunk + i, &s, 8);
    }
  });
  std::vector<float> sinks(static_cast<size_t>(pool.size()));
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = clock_type::now();
    pool.parallel_for(num_tasks, [&](int64_t t, int thread) {
      const auto* p = reinterpret_cast<const __m512*>(data + t * chunk);
      __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
      for (int64_t i = 0; i < chunk / 64; i += 4) {
        a = _mm512_add_ps(a, _mm512_load_ps(reinterpret_cast<const float*>(p + i)));
        b = _mm512_add_ps(b, _mm512_load_ps(reinterpret_cast<const float*>(p + i + 1)));
        c = _mm512_add_ps(c, _mm512_load_ps(reinterpret_cast<const float*>(p + i + 2)));
        d = _mm512_add_ps(d, _mm512_load_ps(reinterpret_cast<const float*>(p + i + 3)));
      }
      sinks[thread] += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
    });
    best = std::max(best, static_cast<double>(bytes) / seconds_since(start));
  }
  asm volatile("" : : "r"(sinks.data()) : "memory");  // keep the sums (and so the reads)
  std::free(data);
  return best;
}

// The best of ten ~5 ms runs on every thread at once: one run can land in a moment where the
// shared VM gives the cores to another tenant (three runs once printed 201 GFLOP/s against the
// usual 326-348, and a prefill share of 68 %).
double measure_peak(int threads, peak_op op) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  constexpr int64_t iterations = 2'000'000;
  const double flops_per_op = op == peak_op::vdpbf16ps ? 64.0 : 32.0;
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<double> rates(static_cast<size_t>(n));
    std::vector<float> sinks(static_cast<size_t>(n));
    std::atomic<int> ready{0};
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t)
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < n) {}  // start together
        const auto start = clock_type::now();
        sinks[static_cast<size_t>(t)] = op == peak_op::vdpbf16ps
                                          ? peak_loop<peak_op::vdpbf16ps>(iterations, t)
                                          : peak_loop<peak_op::vfmadd231ps>(iterations, t);
        rates[static_cast<size_t>(t)] = flops_per_op * 12 * iterations / seconds_since(start);
      });
    for (auto& th : pool)
      th.join();
    asm volatile("" : : "r"(sinks.data()) : "memory");
    double total = 0.0;
    for (const double r : rates)
      total += r;
    best = std::max(best, total);
  }
  return best;
}

// Seconds to read `spans` once with plain 64-byte loads on `pool`, every span split into one
// contiguous part per thread (as the GEMVs split their rows), all in one parallel region: what
// the memory system gives this token's weights when nothing else runs.
double time_plain_read(thread_pool& pool, const std::vector<std::span<const uint8_t>>& spans,
                       std::vector<uint64_t>& sinks) {
  const int64_t parts = pool.size();
  const auto start = clock_type::now();
  pool.parallel_for(static_cast<int64_t>(spans.size()) * parts, [&](int64_t task, int thread) {
    const std::span<const uint8_t> s = spans[static_cast<size_t>(task / parts)];
    const int64_t part = task % parts, n = static_cast<int64_t>(s.size());
    const int64_t begin = n * part / parts / 64 * 64,
                  end = part + 1 == parts ? n : n * (part + 1) / parts / 64 * 64;
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    int64_t i = begin;
    for (; i + 256 <= end; i += 256) {
      a = _mm512_add_epi32(a, _mm512_loadu_si512(s.data() + i));
      b = _mm512_add_epi32(b, _mm512_loadu_si512(s.data() + i + 64));
      c = _mm512_add_epi32(c, _mm512_loadu_si512(s.data() + i + 128));
      d = _mm512_add_epi32(d, _mm512_loadu_si512(s.data() + i + 192));
    }
    uint64_t sum = static_cast<uint64_t>(
      _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a, b), _mm512_add_epi32(c, d))));
    for (; i < end; ++i)
      sum += s[static_cast<size_t>(i)];
    sinks[static_cast<size_t>(thread)] += sum;
  });
  return seconds_since(start);
}

}  // namespace moe::tools

MOE_FAST_TARGET_END
