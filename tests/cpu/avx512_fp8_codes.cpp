// tests/cpu/avx512_fp8_codes.cpp
#include "avx512_fp8_codes.hpp"

#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::testing {

std::array<uint16_t, 256> fp8_codes_scaled_to_bf16() {
  alignas(64) uint8_t codes[256];
  for (int i = 0; i < 256; ++i)
    codes[i] = static_cast<uint8_t>(i);
  alignas(64) std::array<uint16_t, 256> out;
  for (int base = 0; base < 256; base += 64) {
    __m512i u0, u1;
    fast::fp8x64_to_bf16_scaled(_mm512_load_si512(codes + base), u0, u1);
    _mm512_store_si512(out.data() + base, fast::unpack_to_natural_lo(u0, u1));
    _mm512_store_si512(out.data() + base + 32, fast::unpack_to_natural_hi(u0, u1));
  }
  return out;
}

}  // namespace moe::testing

MOE_FAST_TARGET_END
