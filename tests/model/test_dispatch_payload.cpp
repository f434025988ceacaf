// tests/model/test_dispatch_payload.cpp
// The EP payload formats on hand-computed rows.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/model/dispatch_payload.hpp"

using namespace moe;

TEST_CASE("fp8 payload: one scale per 128 channels, amax maps to 448") {
  // row of 130 channels: block 0 has amax 2.0 at channel 5, block 1 (2 channels) amax 0.5
  std::vector<float> x(130, 0.0f);
  x[5] = -2.0f;
  x[6] = 1.0f;
  x[128] = 0.5f;
  x[129] = 0.25f;
  const token_payload p = encode_rows(x.data(), 1, 130, payload_dtype::fp8);
  REQUIRE(p.scales.size() == 2);
  CHECK(p.scales[0] == doctest::Approx(2.0 / 448.0));
  CHECK(p.scales[1] == doctest::Approx(0.5 / 448.0));
  CHECK(p.num_bytes() == 130 + 2 * sizeof(float));
  CHECK(static_cast<uint8_t>(p.data[5]) == 0xFE);  // -448
  std::vector<float> y(130);
  decode_rows(p, y.data());
  CHECK(y[5] == doctest::Approx(-2.0));
  CHECK(y[6] == doctest::Approx(1.0));  // 224 is exact in e4m3
  CHECK(y[128] == doctest::Approx(0.5));
  CHECK(y[129] == doctest::Approx(0.25));  // 224 again
  CHECK(y[0] == 0.0f);
}

TEST_CASE("fp8 payload: relative error of a typical row stays within e4m3's 2^-4") {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  std::vector<float> y = x;
  round_trip_rows(y.data(), 2, 128, payload_dtype::fp8);
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i]) > 0.05f)
      CHECK(std::fabs(y[i] - x[i]) <= std::fabs(x[i]) * 0.0625f + 1e-6f);
}

TEST_CASE("bf16 and fp32 payloads") {
  const std::vector<float> x = {1.0f, 1.00390625f, 3.14159265f};  // 1 + 2^-8 rounds to even -> 1
  std::vector<float> y = x;
  round_trip_rows(y.data(), 1, 3, payload_dtype::bf16);
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == 1.0f);
  CHECK(y[2] == doctest::Approx(3.140625));
  y = x;
  round_trip_rows(y.data(), 1, 3, payload_dtype::fp32);
  CHECK(y == x);
  payload_dtype t{};
  CHECK(parse_payload_dtype("bf16", t));
  CHECK(t == payload_dtype::bf16);
  CHECK_FALSE(parse_payload_dtype("int4", t));
}
