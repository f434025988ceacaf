// actors/policy/eplb.hpp
// The expert-parallel load balancer's placement policy: DeepSeek's EPLB `rebalance_experts`
// (docs/reference/deepseek-system.md §3), a pure function over per-layer expert loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe {

/// A row-major [rows, cols] matrix.
template <class T>
struct matrix {
  int64_t rows = 0, cols = 0;
  std::vector<T> data;

  matrix() = default;
  matrix(int64_t r, int64_t c, T fill = T{}) : rows(r), cols(c), data(static_cast<size_t>(r * c), fill) {}
  [[nodiscard]] T& operator()(int64_t r, int64_t c) { return data[static_cast<size_t>(r * cols + c)]; }
  [[nodiscard]] const T& operator()(int64_t r, int64_t c) const {
    return data[static_cast<size_t>(r * cols + c)];
  }
};

/// Where each physical expert slot lives and which logical expert it holds, per MoE layer.
/// Slot p lives on rank p / (num_physical / num_ranks).
struct expert_plan {
  matrix<int32_t> phy2log;               // [num_layers, num_physical]
  std::vector<matrix<int32_t>> log2phy;  // per layer: [num_logical, max_count], padded with -1
  matrix<int32_t> logcnt;                // [num_layers, num_logical] replicas per logical expert
};

/// Packs each row's n items into m packs of exactly n/m items, heaviest first into the lightest
/// pack with room (ties: lower index). weight: [X, n] -> pack_index, rank_in_pack: [X, n].
void balanced_packing(const matrix<double>& weight, int64_t num_packs, matrix<int32_t>& pack_index,
                      matrix<int32_t>& rank_in_pack);

/// Adds num_physical - num_logical replicas, each to the expert with the highest load per replica.
/// weight: [X, num_logical] -> phy2log, rank: [X, num_physical], logcnt: [X, num_logical].
void replicate_experts(const matrix<double>& weight, int64_t num_physical, matrix<int32_t>& phy2log,
                       matrix<int32_t>& rank, matrix<int32_t>& logcnt);

/// Places `num_physical` replicas to minimise the maximum per-rank load. `load` is
/// [num_moe_layers, num_logical_experts]. Hierarchical (groups packed to nodes, replicas inside
/// nodes) when num_groups % num_nodes == 0, else global (one group, one node). Requires
/// num_physical % num_ranks == 0, and for the hierarchical policy also num_ranks % num_nodes == 0
/// and num_logical % num_groups == 0 (eplb.py's asserts); no layers give an empty plan.
[[nodiscard]] expert_plan rebalance_experts(const matrix<double>& load, int64_t num_physical,
                                            int64_t num_groups, int64_t num_nodes, int64_t num_ranks);

/// Per-rank received load of a plan for one layer: sum over its slots of load / replica count.
[[nodiscard]] std::vector<double> rank_loads(const expert_plan& plan, const matrix<double>& load,
                                             int64_t layer_idx, int64_t num_ranks);

}  // namespace moe
