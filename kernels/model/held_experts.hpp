// kernels/model/held_experts.hpp
// The routed experts one rank of an expert-parallel group holds in memory of its own: a copy of
// each expert its placement gives it (weights, FP8 block scales, BF16 GEMM panels), not a view
// of the shared checkpoint. Moving an expert to another rank sends its bytes (encode_expert) and
// the receiver lays them out in its own memory (decode_expert), as a remote rank would.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/model/weights.hpp"

namespace moe {

/// One routed expert's weights in a buffer of their own (64-byte aligned sections).
struct expert_copy {
  mlp_weights weights;           // views into `memory`
  std::shared_ptr<void> memory;  // owns them
  int64_t memory_bytes = 0;      // of `memory` (GEMM panels and alignment included)
  int64_t wire_bytes = 0;        // weights and block scales: what moving it sends (mlp_bytes)
};

/// `m` copied into memory of its own (its GEMM panels too, if it has them).
[[nodiscard]] std::shared_ptr<const expert_copy> copy_expert(const mlp_weights& m);

/// The bytes a move sends: a small header (each projection's dtype, layout, shape, block size)
/// then each projection's weight bytes and FP8 block scales. GEMM panels are not sent; the
/// receiver packs them again where the sender had them.
[[nodiscard]] std::vector<uint8_t> encode_expert(const mlp_weights& m);
/// The expert `bytes` encode, in memory of its own. Throws std::invalid_argument naming what is
/// wrong (truncated, a bad dtype or layout, sizes that do not match the shape).
[[nodiscard]] std::shared_ptr<const expert_copy> decode_expert(std::span<const uint8_t> bytes);

/// The routed experts of one MoE layer a rank holds.
struct held_layer {
  std::vector<int32_t> experts;                            // logical ids, ascending
  std::vector<std::shared_ptr<const expert_copy>> copies;  // per held expert
  std::vector<mlp_weights> weights;                        // per held expert: what moe_experts reads
  std::vector<int32_t> local;                              // [num_logical] -> index in experts; -1: not held

  [[nodiscard]] bool holds(int64_t expert) const noexcept {
    return expert >= 0 && expert < static_cast<int64_t>(local.size()) && local[expert] >= 0;
  }
};

/// Every layer's held experts (empty on dense layers).
struct held_experts {
  std::vector<held_layer> layers;

  /// The copy of `expert` of `layer` this rank holds; null if none.
  [[nodiscard]] std::shared_ptr<const expert_copy> find(int64_t layer, int64_t expert) const;
  /// Bytes of expert memory held (every copy's memory_bytes).
  [[nodiscard]] int64_t memory_bytes() const noexcept;
  [[nodiscard]] int64_t num_copies() const noexcept;
};

/// A layer holding `experts` (ascending, distinct, each in [0, num_logical)) with their copies.
[[nodiscard]] held_layer make_held_layer(std::vector<int32_t> experts,
                                         std::vector<std::shared_ptr<const expert_copy>> copies,
                                         int64_t num_logical);

}  // namespace moe
