// kernels/model/expert_parallel.hpp
// Expert parallelism for one MoE layer and one micro-batch, as plain functions: the source rank
// splits its tokens' (token, k) pairs by the rank holding each chosen expert and encodes one
// dispatch per destination (FP8 rows, DeepEP's format); each destination runs its experts over
// every dispatch it received and answers with BF16 weighted outputs per pair; the source sums a
// token's pairs in k order. The sum order is fixed, so the result equals routed_local bit for bit
// on the reference backend, whatever the number of ranks, placement or arrival order.
// With combine_sum::per_rank the destination sums its pairs of each token first (DeepEP's
// combine): fewer bytes, a result fixed per topology (see dispatch_payload.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/model/dispatch_payload.hpp"
#include "kernels/model/held_experts.hpp"
#include "kernels/model/weights.hpp"

namespace moe {

/// One MoE layer's physical expert slots over an EP group: rank r holds slots
/// [r * slots_per_rank, (r + 1) * slots_per_rank); a logical expert may have several replicas.
struct layer_placement {
  int64_t num_ranks = 1;
  int64_t slots_per_rank = 0;
  std::vector<int32_t> slot_expert;                // [num_ranks * slots_per_rank] physical -> logical
  std::vector<std::vector<int32_t>> expert_slots;  // [num_logical] -> its physical slots, ascending

  [[nodiscard]] int64_t rank_of_slot(int64_t slot) const noexcept { return slot / slots_per_rank; }
};

/// Builds the placement from a physical -> logical table (EPLB's phy2log row). Throws
/// std::invalid_argument unless the slots split evenly over the ranks and every logical expert
/// in [0, num_logical) has a slot.
[[nodiscard]] layer_placement make_layer_placement(std::vector<int32_t> slot_expert, int64_t num_ranks,
                                                   int64_t num_logical);

/// Logical experts spread over the ranks in order, then `num_redundant` extra replicas of experts
/// 0, 1, ... (the placement before any load is known).
[[nodiscard]] layer_placement default_layer_placement(int64_t num_logical, int64_t num_redundant,
                                                      int64_t num_ranks);

/// The placement of a group shrunk to `num_ranks` ranks (the survivors of lost ones): on each
/// MoE layer of `first` (empty layers stay empty), default_layer_placement of its logical
/// experts over `num_ranks`, with its redundant slots rounded up to the fewest that split
/// evenly (16 experts, none redundant, over 3 ranks: 18 slots, experts 0 and 1 twice). Every
/// expert has a slot. Throws std::invalid_argument unless num_ranks >= 1.
[[nodiscard]] std::vector<layer_placement> placements_for_survivors(const std::vector<layer_placement>& first,
                                                                    int64_t num_ranks);

/// The logical experts rank `rank` holds under `p`: its slots' experts, ascending, each once.
[[nodiscard]] std::vector<int32_t> experts_of_rank(const layer_placement& p, int64_t rank);

/// Where a rank gets the copy of an expert it is to hold (layer, logical expert); null: nowhere.
using expert_source = std::function<std::shared_ptr<const expert_copy>(int64_t layer, int32_t expert)>;

/// What rank `rank` holds under `placements` (one per layer, empty on dense layers), each copy
/// from `source`. Throws std::invalid_argument naming the first expert `source` has no copy of.
[[nodiscard]] std::shared_ptr<const held_experts> hold_experts(const std::vector<layer_placement>& placements,
                                                               int64_t rank, const expert_source& source);

/// What rank `rank` holds under `placements`, copied from the model's (the checkpoint's) weights.
[[nodiscard]] std::shared_ptr<const held_experts> hold_experts_from(
  const model_weights& weights, const std::vector<layer_placement>& placements, int64_t rank);

/// The (layer, expert) pairs rank `rank` must hold under `placements` that `held` has no copy of.
[[nodiscard]] std::vector<std::pair<int64_t, int32_t>> missing_experts(
  const held_experts& held, const std::vector<layer_placement>& placements, int64_t rank);

/// Which message a step's exchange belongs to.
struct ep_key {
  int64_t step = 0;
  int64_t layer_idx = 0;
  int64_t micro_batch = 0;
  friend bool operator==(const ep_key&, const ep_key&) = default;
  friend auto operator<=>(const ep_key&, const ep_key&) = default;
};

/// Tokens one rank sends another for one (step, layer, micro-batch); possibly none.
struct ep_dispatch {
  ep_key key;
  int64_t src_rank = 0;
  token_payload rows;                                // each dispatched token once: [num_rows, hidden]
  std::vector<int32_t> pair_row;                     // per (token, k) pair: its row in `rows`
  std::vector<int32_t> pair_expert;                  // per pair: logical expert
  std::vector<float> pair_weight;                    // per pair: routing weight
  payload_dtype combine_type = payload_dtype::bf16;  // what the answer carries
  combine_sum sum = combine_sum::per_pair;           // and in which shape

  [[nodiscard]] int64_t num_pairs() const noexcept { return static_cast<int64_t>(pair_row.size()); }
};

/// The answer to one ep_dispatch: weighted expert outputs per pair, in the dispatch's pair order
/// (per_pair), or their sum per dispatched row (per_rank).
struct ep_combine {
  ep_key key;
  int64_t src_rank = 0;   // the rank that computed them
  token_payload outputs;  // [num_pairs or num_rows, hidden]
};

/// The source side's record of where each (token, k) pair went.
struct dispatch_plan {
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  std::vector<int32_t> pair_dest;   // [num_tokens * top_k] destination rank
  std::vector<int32_t> pair_index;  // [num_tokens * top_k] index among that rank's pairs
  std::vector<int32_t> pair_row;    // [num_tokens * top_k] the token's row in that rank's dispatch
  combine_sum sum = combine_sum::per_pair;
};

/// Splits the pairs of x [num_tokens, hidden] by destination (a replicated expert's replica chosen
/// by (token + src_rank) mod replicas) and encodes one dispatch per rank of the group, in rank order.
[[nodiscard]] std::vector<std::shared_ptr<ep_dispatch>> make_dispatches(
  const layer_placement& placement, ep_key key, int64_t src_rank, std::span<const float> x,
  std::span<const int32_t> topk_ids, std::span<const float> topk_weights, int64_t num_tokens, int64_t hidden,
  int64_t top_k, ep_precision ep, dispatch_plan& plan);

/// The destination side: runs the routed experts `held` (rank `rank`'s, of the dispatches' layer)
/// over the pairs of every received dispatch in one batch and answers each (same order). Every
/// pair's expert must be held (logic_error if not).
/// A per_rank answer to this rank's own dispatch stays fp32: it crosses no link, and a group of
/// one rank then computes what routed_local does.
[[nodiscard]] std::vector<std::shared_ptr<ep_combine>> run_dispatched_experts(
  backend& device, const held_layer& held, int64_t rank,
  std::span<const std::shared_ptr<const ep_dispatch>> received, int64_t hidden);

/// Rows per expert slot every peer's dispatch must bring before answer_groups splits the expert
/// batch by destination: past the GEMV range (fast_linear's gemv_max_rows), so reading each
/// expert's weights once per group instead of once costs little against the GEMM it feeds.
/// (A 512-token prompt in two micro-batches of the small preset brings ~16 per peer of two.)
inline constexpr int64_t answer_split_min_rows = 16;

/// The order a destination computes and answers the dispatches it received (`received` sorted by
/// src_rank; indices into it), in groups: each group runs as one expert batch and its answers leave
/// as soon as it is done. One group, every expert's weights read once, unless every peer's dispatch
/// brings at least `split_min_rows` pairs per expert slot of this rank (prefill-sized batches):
/// then each peer alone, in ring order after `rank`, and this rank's own dispatch last (its answer
/// crosses no link), so the first combines are on the wire while the rest computes.
[[nodiscard]] std::vector<std::vector<size_t>> answer_groups(
  std::span<const std::shared_ptr<const ep_dispatch>> received, int64_t rank, int64_t slots_per_rank,
  int64_t split_min_rows = answer_split_min_rows);

/// The source side: out[t] = sum over k in order of pair (t, k)'s output (per_pair), or over the
/// ranks t went to, in rank order, of their row for t (per_rank); `answers` indexed by destination
/// rank. out: [num_tokens, hidden] (overwritten).
void combine_outputs(const dispatch_plan& plan, std::span<const std::shared_ptr<const ep_combine>> answers,
                     float* out, int64_t hidden);

}  // namespace moe
