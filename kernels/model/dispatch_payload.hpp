// kernels/model/dispatch_payload.hpp
// Token rows as they travel between ranks in expert parallelism: dispatch sends FP8 e4m3 with
// one fp32 scale per 128 channels (DeepSeek/DeepEP's format; BF16 or FP32 selectable), combine
// returns BF16 weighted expert outputs. Raw buffers, not element lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace moe {

enum class payload_dtype : uint8_t { fp8, bf16, fp32 };

/// "fp8", "bf16", "fp32".
[[nodiscard]] std::string_view to_string(payload_dtype t) noexcept;
/// Inverse of to_string; false for anything else.
[[nodiscard]] bool parse_payload_dtype(std::string_view name, payload_dtype& out) noexcept;

/// How a combine answers a dispatch.
///  - per_pair: one weighted output per (token, expert) pair; the source sums a token's pairs in k
///    order, so the numbers do not depend on the topology (the single-rank path sums the same way).
///  - per_rank: DeepEP's combine: the expert rank sums its pairs of a token (fp32, k order) and
///    answers one row per dispatched token, top_k / ranks-touched times fewer bytes; the source
///    sums the ranks' rows in rank order. Not reproducible across topologies (each row is rounded
///    to the combine type once more, at a topology-dependent point), nor across loads within one:
///    a rank's rows for itself skip that rounding (expert_parallel.cpp), so the numbers depend on
///    the rank a balancer picks, and a redundant expert's replica is picked by the token's row.
enum class combine_sum : uint8_t { per_pair, per_rank };

/// "exact" (per_pair), "reduced" (per_rank).
[[nodiscard]] std::string_view to_string(combine_sum s) noexcept;
/// Inverse of to_string; false for anything else.
[[nodiscard]] bool parse_combine_sum(std::string_view name, combine_sum& out) noexcept;

/// How expert parallelism moves tokens: DeepSeek dispatches FP8 and combines BF16.
struct ep_precision {
  payload_dtype dispatch = payload_dtype::fp32;
  payload_dtype combine = payload_dtype::fp32;  // fp32 or bf16
  combine_sum sum = combine_sum::per_pair;
};

/// Channels per FP8 scale.
inline constexpr int64_t payload_block = 128;

/// Encoded rows [num_rows, dim].
struct token_payload {
  payload_dtype type = payload_dtype::fp32;
  int64_t num_rows = 0;
  int64_t dim = 0;
  std::vector<std::byte> data;  // num_rows * dim elements of `type`
  std::vector<float> scales;    // fp8 only: [num_rows, ceil(dim / 128)]

  [[nodiscard]] size_t num_bytes() const noexcept { return data.size() + scales.size() * sizeof(float); }
};

/// Encodes x [num_rows, dim]. FP8: per row and block of 128 channels,
/// s = max(amax, 1e-4) / 448 and q = e4m3(x / s), round to nearest even.
[[nodiscard]] token_payload encode_rows(const float* x, int64_t num_rows, int64_t dim, payload_dtype type);

/// Decodes into out [num_rows, dim] (FP8: q * s).
void decode_rows(const token_payload& payload, float* out);

/// x := decode(encode(x)): what rows look like after a trip through a payload of `type`.
void round_trip_rows(float* x, int64_t num_rows, int64_t dim, payload_dtype type);

}  // namespace moe
