// tools/onednn/gemm_vs_onednn.cpp
// moeserve-gemm-vs-onednn: the fast path's prefill matmuls against oneDNN's (Debian's libdnnl)
// on the same shapes and threads, in one process, alternated round by round so both see the same
// moments of a shared VM. Issue 2 asks for a GEMM library chosen by measurement; this prints
// the measurement. oneDNN runs f32 (weights reordered into its own fp32 layout ahead of time,
// four bytes a weight) and bf16 (two); ours reads BF16 panels and FP8 panels as a session holds
// them, widened or expanded per call. Both use every core.
// Usage: moeserve-gemm-vs-onednn [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <dnnl.hpp>

#include "kernels/cpu/fast_backend.hpp"
#include "tools/bench_gemm_weights.hpp"

namespace {

using namespace moe;
using clock_type = std::chrono::steady_clock;

// oneDNN's matmul of one shape: src [m, in] row-major, weights [in, out] in the layout it
// prefers (reordered once, outside the timing), dst [m, out] f32.
struct onednn_matmul {
  dnnl::memory src, weights, dst;
  dnnl::matmul prim;

  onednn_matmul(dnnl::engine& eng, const tools::gemm_shape& g, dnnl::memory::data_type dt) {
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a({g.m, g.in}, dt, tag::ab), b({g.in, g.out}, dt, tag::any),
      c({g.m, g.out}, dnnl::memory::data_type::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
    src = dnnl::memory(a, eng);
    weights = dnnl::memory(pd.weights_desc(), eng);
    dst = dnnl::memory(c, eng);
    prim = dnnl::matmul(pd);
    // Normal values: whatever the heap held before could read as subnormals, which cost a
    // microcode assist per operation without flush-to-zero.
    for (dnnl::memory* m : {&src, &weights}) {
      const size_t bytes = m->get_desc().get_size();
      if (dt == dnnl::memory::data_type::f32)
        std::fill_n(static_cast<float*>(m->get_data_handle()), bytes / 4, 0.01f);
      else
        std::fill_n(static_cast<uint16_t*>(m->get_data_handle()), bytes / 2, uint16_t{0x3c24});  // bf16 0.01
    }
  }
  double seconds(dnnl::stream& s, int calls) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = clock_type::now();
      for (int i = 0; i < calls; ++i)
        prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
      s.wait();
      best = std::min(best, std::chrono::duration<double>(clock_type::now() - start).count() / calls);
    }
    return best;
  }
};

}  // namespace

int main(int argc, char** argv) {
  long rounds = 3;
  char* end = nullptr;
  if (argc == 2)
    rounds = std::strtol(argv[1], &end, 10);
  if (argc > 2 || (argc == 2 && (end == argv[1] || *end != '\0' || rounds < 1 || rounds > 1000))) {
    std::fprintf(stderr, "usage: %s [ROUNDS]   (ROUNDS: 1 to 1000, default 3)\n", argv[0]);
    return 2;
  }
  auto ours = std::make_unique<cpu_fast_backend>(0);  // all cores, as oneDNN's OpenMP
  // Each side's idle threads spin for a while after a call (our pool 300 us, OpenMP's by default
  // longer) on the cores the other then needs: a pause between the two sides lets them sleep.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  std::printf("prefill matmuls, %d threads, best of %d alternated rounds (GFLOP/s; oneDNN f32 has its "
              "weights in fp32, reordered ahead)\n",
              ours->num_threads(), static_cast<int>(rounds));
  std::printf("  %-34s %9s %9s %11s %11s %14s\n", "", "ours BF16", "ours FP8", "oneDNN f32", "oneDNN bf16",
              "ours BF16/f32");
  for (const tools::gemm_shape& g : tools::prefill_gemm_shapes()) {
    std::vector<std::unique_ptr<tools::bench_weight>> bf16, fp8;
    bf16.push_back(tools::make_bench_weight(dtype::bf16, g.out, g.in, 1));
    fp8.push_back(tools::make_bench_weight(dtype::f8_e4m3, g.out, g.in, 1));
    onednn_matmul f32(eng, g, dnnl::memory::data_type::f32), b16(eng, g, dnnl::memory::data_type::bf16);
    const double flop = 2.0 * g.m * g.out * g.in;
    const int calls = static_cast<int>(std::max<double>(3, 2e9 / flop));
    double t[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r) {
      t[0] = std::min(t[0], tools::time_linear(*ours, bf16, g.m, calls));
      t[1] = std::min(t[1], tools::time_linear(*ours, fp8, g.m, calls));
      settle();
      t[2] = std::min(t[2], f32.seconds(stream, calls));
      t[3] = std::min(t[3], b16.seconds(stream, calls));
      settle();
    }
    std::printf("  %-34s %9.1f %9.1f %11.1f %11.1f %14.2f\n", g.what, flop / t[0] * 1e-9, flop / t[1] * 1e-9,
                flop / t[2] * 1e-9, flop / t[3] * 1e-9, t[2] / t[0]);
  }
  return 0;
}
