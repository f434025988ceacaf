// tests/cuda/test_cuda_parity.cpp
// Every CUDA device against the CPU reference, op by op (CONTRIBUTING.md, Code). Without a device (or
// without nvcc at build time) the parity cases say why they were skipped and pass.
#include <doctest/doctest.h>

#include <string>

#include "cuda/cases.hpp"

#ifdef MOE_HAVE_CUDA
#  include <stdexcept>

#  include "kernels/cuda/cuda_backend.hpp"
#  include "kernels/cuda/launchers.hpp"
#endif

namespace moe::test {

#ifdef MOE_HAVE_CUDA
namespace {

/// The CUDA backends, or none after a MESSAGE saying why the case is skipped.
std::vector<std::unique_ptr<backend>> devices_or_skip() {
  auto devices = make_cuda_backends();
  if (devices.empty())
    MESSAGE("CUDA parity skipped: " << cuda_status());
  return devices;
}

}  // namespace

TEST_CASE("build: the CUDA library links and reports its status") {
  const std::string status = cuda_status();
  MESSAGE("cuda_status: " << status);
  CHECK(!status.empty());
  const auto devices = make_cuda_backends();
  if (devices.empty()) {
    CHECK(status.rfind("no CUDA device", 0) == 0);
    return;
  }
  CHECK(status.find("cuda:0") != std::string::npos);
  for (size_t d = 0; d < devices.size(); ++d)
    CHECK(devices[d]->name() == "cuda:" + std::to_string(d));
}

TEST_CASE("launchers: bad arguments throw before touching a device") {
  float f = 0.0f;
  int32_t id = 0;
  const cuda::rms_norm_args norm{&f, &f, &f, 1, 4, 2, 1e-6f};  // stride < dim
  CHECK_THROWS_AS(cuda::rms_norm(norm, nullptr), std::invalid_argument);
  cuda::moe_gate_args gate{&f, nullptr, &id, &f, 1, 256, 8, 4, 8, true, 2.5f};
  gate.num_groups = 7;  // does not divide 256
  CHECK_THROWS_AS(cuda::moe_gate(gate, nullptr), std::invalid_argument);
  gate.num_groups = 8;
  gate.top_k = 4 * 32 + 1;  // more than the kept groups hold
  CHECK_THROWS_AS(cuda::moe_gate(gate, nullptr), std::invalid_argument);
  gate.top_k = 8;
  gate.num_tokens = 0;  // nothing to do: no launch
  CHECK_NOTHROW(cuda::moe_gate(gate, nullptr));
  if (make_cuda_backends().empty()) {  // a real launch fails loudly
    gate.num_tokens = 1;
    CHECK_THROWS_AS(cuda::moe_gate(gate, nullptr), std::runtime_error);
  }
}

TEST_CASE("rms_norm: every CUDA backend matches the CPU reference") {
  const auto ref = make_cpu_reference_backend();
  struct shape {
    int64_t tokens, dim, stride;
  };
  for (auto& dev : devices_or_skip()) {
    CAPTURE(dev->name());
    CHECK(dev->supports(op_kind::rms_norm));
    for (const shape s : {shape{1, 7168, 0}, shape{37, 7168, 0}, shape{5, 64, 80}, shape{4, 1000, 1003}}) {
      CAPTURE(s.tokens);
      CAPTURE(s.dim);
      CAPTURE(s.stride);
      const norm_case c = make_norm_case(s.tokens, s.dim, s.stride, 11);
      for (const bool in_place : {false, true}) {
        CAPTURE(in_place);
        check_norm_close(c, run_norm(*dev, c, in_place), run_norm(*ref, c, in_place));
      }
    }
  }
}

TEST_CASE("moe_gate: every CUDA backend matches the CPU reference") {
  const auto ref = make_cpu_reference_backend();
  for (auto& dev : devices_or_skip()) {
    CAPTURE(dev->name());
    CHECK(dev->supports(op_kind::moe_gate));
    for (int64_t tokens = 1; tokens <= 64; ++tokens) {
      CAPTURE(tokens);
      const gate_case c = make_v3_gate_case(tokens, static_cast<uint32_t>(tokens));
      const gate_result got = run_gate(*dev, c);
      check_gate_close(c, got, run_gate(*ref, c));
      check_gate_order(c, got);
    }
    gate_case no_bias = make_v3_gate_case(33, 99);
    no_bias.bias.clear();
    check_gate_close(no_bias, run_gate(*dev, no_bias), run_gate(*ref, no_bias));

    const gate_case spec = spec_gate_case();
    const gate_result r = run_gate(*dev, spec);
    check_spec_gate(r);
    check_spec_gate(run_gate(*ref, spec));
    CHECK(r.ids == std::vector<int32_t>{3, 2});
  }
}

TEST_CASE("cuda_backend: unsupported ops say so") {
  for (auto& dev : devices_or_skip()) {
    CHECK_FALSE(dev->supports(op_kind::linear));
    CHECK_THROWS_AS(dev->add(add_params{}), std::logic_error);
  }
}

TEST_CASE("available_backends: lists every CUDA device") {
  const auto devices = devices_or_skip();
  if (devices.empty())
    return;
  std::vector<std::string> names;
  for (const auto& b : available_backends())
    names.emplace_back(b->name());
  for (const auto& dev : devices)
    CHECK(std::find(names.begin(), names.end(), std::string(dev->name())) != names.end());
}

#else

TEST_CASE("build: CUDA not built") {
  MESSAGE("CUDA parity skipped: built without CUDA (no nvcc found at configure time)");
}

#endif

}  // namespace moe::test
