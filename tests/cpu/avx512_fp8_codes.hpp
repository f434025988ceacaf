// tests/cpu/avx512_fp8_codes.hpp
// The fast path's in-register e4m3 expansion run over all 256 codes, for test_fast_linear.cpp.
// Its one file holds the intrinsics, in a fast-path target region (kernels/cpu/fast_simd.hpp),
// and registers no test case, so the test binary starts on a CPU without AVX-512 (where the test skips).
#pragma once

#include <array>
#include <cstdint>

namespace moe::testing {

/// The 256 e4m3 codes through fast::fp8x64_to_bf16_scaled (64 at a time, unpacked to natural
/// order), as bf16 bits in code order. Only where cpu_fast_path_supported().
[[nodiscard]] std::array<uint16_t, 256> fp8_codes_scaled_to_bf16();

}  // namespace moe::testing
