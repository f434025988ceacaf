// kernels/model/dispatch_payload.cpp
#include "kernels/model/dispatch_payload.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dtype.hpp"

namespace moe {

std::string_view to_string(payload_dtype t) noexcept {
  switch (t) {
    case payload_dtype::fp8: return "fp8";
    case payload_dtype::bf16: return "bf16";
    case payload_dtype::fp32: return "fp32";
  }
  return "?";
}

bool parse_payload_dtype(std::string_view name, payload_dtype& out) noexcept {
  for (payload_dtype t : {payload_dtype::fp8, payload_dtype::bf16, payload_dtype::fp32})
    if (to_string(t) == name) {
      out = t;
      return true;
    }
  return false;
}

std::string_view to_string(combine_sum s) noexcept {
  return s == combine_sum::per_rank ? "reduced" : "exact";
}

bool parse_combine_sum(std::string_view name, combine_sum& out) noexcept {
  for (combine_sum s : {combine_sum::per_pair, combine_sum::per_rank})
    if (to_string(s) == name) {
      out = s;
      return true;
    }
  return false;
}

token_payload encode_rows(const float* x, int64_t num_rows, int64_t dim, payload_dtype type) {
  token_payload p{.type = type, .num_rows = num_rows, .dim = dim, .data = {}, .scales = {}};
  const int64_t n = num_rows * dim;
  switch (type) {
    case payload_dtype::fp32:
      p.data.resize(static_cast<size_t>(n) * sizeof(float));
      if (n > 0)  // an empty dispatch may come with null pointers
        std::memcpy(p.data.data(), x, p.data.size());
      break;
    case payload_dtype::bf16: {
      p.data.resize(static_cast<size_t>(n) * sizeof(uint16_t));
      auto* out = reinterpret_cast<uint16_t*>(p.data.data());
      for (int64_t i = 0; i < n; ++i)
        out[i] = f32_to_bf16(x[i]);
      break;
    }
    case payload_dtype::fp8: {
      const int64_t blocks = (dim + payload_block - 1) / payload_block;
      p.data.resize(static_cast<size_t>(n));
      p.scales.resize(static_cast<size_t>(num_rows * blocks));
      auto* out = reinterpret_cast<uint8_t*>(p.data.data());
      for (int64_t r = 0; r < num_rows; ++r)
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t begin = r * dim + b * payload_block;
          const int64_t end = r * dim + std::min(dim, (b + 1) * payload_block);
          float amax = 0.0f;
          for (int64_t i = begin; i < end; ++i)
            amax = std::max(amax, std::fabs(x[i]));
          const float scale = std::max(amax, 1e-4f) / 448.0f;
          p.scales[r * blocks + b] = scale;
          for (int64_t i = begin; i < end; ++i)
            out[i] = f32_to_fp8_e4m3(x[i] / scale);
        }
      break;
    }
  }
  return p;
}

void decode_rows(const token_payload& p, float* out) {
  const int64_t n = p.num_rows * p.dim;
  switch (p.type) {
    case payload_dtype::fp32:
      if (n > 0)
        std::memcpy(out, p.data.data(), static_cast<size_t>(n) * sizeof(float));
      break;
    case payload_dtype::bf16: {
      const auto* in = reinterpret_cast<const uint16_t*>(p.data.data());
      for (int64_t i = 0; i < n; ++i)
        out[i] = bf16_to_f32(in[i]);
      break;
    }
    case payload_dtype::fp8: {
      const int64_t blocks = (p.dim + payload_block - 1) / payload_block;
      const auto* in = reinterpret_cast<const uint8_t*>(p.data.data());
      for (int64_t r = 0; r < p.num_rows; ++r)
        for (int64_t c = 0; c < p.dim; ++c)
          out[r * p.dim + c] = fp8_e4m3_to_f32(in[r * p.dim + c]) * p.scales[r * blocks + c / payload_block];
      break;
    }
  }
}

void round_trip_rows(float* x, int64_t num_rows, int64_t dim, payload_dtype type) {
  if (type == payload_dtype::fp32)
    return;
  decode_rows(encode_rows(x, num_rows, dim, type), x);
}

}  // namespace moe
