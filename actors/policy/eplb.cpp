// actors/policy/eplb.cpp
// A line-by-line port of DeepSeek's eplb.py (balanced_packing, replicate_experts,
// rebalance_experts_hierarchical, rebalance_experts); ties resolve to the lower index.
#include "actors/policy/eplb.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace moe {

namespace {

// Inverse permutation of every row.
matrix<int32_t> inverse(const matrix<int32_t>& perm) {
  matrix<int32_t> inv(perm.rows, perm.cols);
  for (int64_t r = 0; r < perm.rows; ++r)
    for (int64_t c = 0; c < perm.cols; ++c)
      inv(r, perm(r, c)) = static_cast<int32_t>(c);
  return inv;
}

}  // namespace

void balanced_packing(const matrix<double>& weight, int64_t num_packs, matrix<int32_t>& pack_index,
                      matrix<int32_t>& rank_in_pack) {
  const int64_t n = weight.cols, per_pack = n / num_packs;
  if (n % num_packs != 0)
    throw std::invalid_argument("balanced_packing: items must divide evenly into packs");
  pack_index = matrix<int32_t>(weight.rows, n);
  rank_in_pack = matrix<int32_t>(weight.rows, n);
  for (int64_t r = 0; r < weight.rows; ++r) {
    if (per_pack == 1) {  // identity, no sorting
      for (int64_t j = 0; j < n; ++j)
        pack_index(r, j) = static_cast<int32_t>(j);
      continue;
    }
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return weight(r, a) > weight(r, b); });
    std::vector<double> pack_weight(static_cast<size_t>(num_packs), 0.0);
    std::vector<int32_t> pack_items(static_cast<size_t>(num_packs), 0);
    for (int32_t item : order) {
      int64_t best = -1;
      for (int64_t p = 0; p < num_packs; ++p)
        if (pack_items[p] < per_pack && (best < 0 || pack_weight[p] < pack_weight[best]))
          best = p;
      pack_index(r, item) = static_cast<int32_t>(best);
      rank_in_pack(r, item) = pack_items[best]++;
      pack_weight[best] += weight(r, item);
    }
  }
}

void replicate_experts(const matrix<double>& weight, int64_t num_physical, matrix<int32_t>& phy2log,
                       matrix<int32_t>& rank, matrix<int32_t>& logcnt) {
  const int64_t num_logical = weight.cols;
  phy2log = matrix<int32_t>(weight.rows, num_physical);
  rank = matrix<int32_t>(weight.rows, num_physical);
  logcnt = matrix<int32_t>(weight.rows, num_logical, 1);
  for (int64_t r = 0; r < weight.rows; ++r) {
    for (int64_t j = 0; j < num_logical; ++j)
      phy2log(r, j) = static_cast<int32_t>(j);
    for (int64_t i = num_logical; i < num_physical; ++i) {
      int64_t best = 0;  // argmax load / count, first on ties
      for (int64_t j = 1; j < num_logical; ++j)
        if (weight(r, j) / logcnt(r, j) > weight(r, best) / logcnt(r, best))
          best = j;
      phy2log(r, i) = static_cast<int32_t>(best);
      rank(r, i) = logcnt(r, best)++;
    }
  }
}

namespace {

// eplb.py rebalance_experts_hierarchical: returns phy2log, phyrank [L, P] and logcnt [L, E].
void hierarchical(const matrix<double>& w, int64_t P, int64_t G, int64_t N, int64_t num_ranks,
                  matrix<int32_t>& pphy2log, matrix<int32_t>& pphyrank, matrix<int32_t>& logcnt) {
  const int64_t L = w.rows, E = w.cols, group_size = E / G, groups_per_node = G / N;
  const int64_t per_rank = P / num_ranks, E_node = E / N, P_node = P / N;
  // 1. groups -> nodes; logical expert e gets a node-major "meta-logical" index
  matrix<double> tokens_per_group(L, G);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e)
      tokens_per_group(l, e / group_size) += w(l, e);
  matrix<int32_t> group_pack, group_rank;
  balanced_packing(tokens_per_group, N, group_pack, group_rank);
  matrix<int32_t> log2mlog(L, E);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) {
      const int64_t g = e / group_size;
      log2mlog(l, e) = static_cast<int32_t>(
        (group_pack(l, g) * groups_per_node + group_rank(l, g)) * group_size + e % group_size);
    }
  const matrix<int32_t> mlog2log = inverse(log2mlog);
  // 2. replicas inside each node: rows are (layer, node)
  matrix<double> tokens_per_mlog(L * N, E_node);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t m = 0; m < E; ++m)
      tokens_per_mlog(l * N + m / E_node, m % E_node) = w(l, mlog2log(l, m));
  matrix<int32_t> phy2mlog, phyrank, mlogcnt;
  replicate_experts(tokens_per_mlog, P_node, phy2mlog, phyrank, mlogcnt);
  // 3. physical experts -> ranks inside the node
  matrix<double> tokens_per_phy(L * N, P_node);
  for (int64_t r = 0; r < L * N; ++r)
    for (int64_t p = 0; p < P_node; ++p)
      tokens_per_phy(r, p) = tokens_per_mlog(r, phy2mlog(r, p)) / mlogcnt(r, phy2mlog(r, p));
  matrix<int32_t> pack, rank_in_pack;
  balanced_packing(tokens_per_phy, num_ranks / N, pack, rank_in_pack);
  matrix<int32_t> phy2pphy(L * N, P_node);
  for (int64_t r = 0; r < L * N; ++r)
    for (int64_t p = 0; p < P_node; ++p)
      phy2pphy(r, p) = static_cast<int32_t>(pack(r, p) * per_rank + rank_in_pack(r, p));
  const matrix<int32_t> pphy2phy = inverse(phy2pphy);
  // 4. map back to logical experts
  pphy2log = matrix<int32_t>(L, P);
  pphyrank = matrix<int32_t>(L, P);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t node = 0; node < N; ++node)
      for (int64_t q = 0; q < P_node; ++q) {
        const int64_t row = l * N + node, phy = pphy2phy(row, q);
        const int64_t mlog = phy2mlog(row, phy) + node * E_node;
        pphy2log(l, node * P_node + q) = mlog2log(l, mlog);
        pphyrank(l, node * P_node + q) = phyrank(row, phy);
      }
  logcnt = matrix<int32_t>(L, E);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) {
      const int64_t m = log2mlog(l, e);
      logcnt(l, e) = mlogcnt(l * N + m / E_node, m % E_node);
    }
}

}  // namespace

expert_plan rebalance_experts(const matrix<double>& load, int64_t num_physical, int64_t num_groups,
                              int64_t num_nodes, int64_t num_ranks) {
  const int64_t E = load.cols;
  if (E <= 0 || num_physical < E || num_ranks <= 0 || num_physical % num_ranks != 0 || num_nodes <= 0 ||
      num_groups <= 0)
    throw std::invalid_argument(
      "rebalance_experts: need experts > 0, num_physical >= experts and num_physical % num_ranks == 0");
  // the node and group conditions bind the hierarchical policy only; the global one places
  // over one group and one node
  const bool hierarchical_policy = num_groups % num_nodes == 0;
  if (hierarchical_policy && (num_ranks % num_nodes != 0 || E % num_groups != 0))
    throw std::invalid_argument(
      "rebalance_experts: the hierarchical policy (groups % nodes == 0) needs num_ranks % num_nodes == 0 "
      "and experts % num_groups == 0");
  expert_plan plan;
  if (load.rows == 0) {  // no MoE layers: nothing to place
    plan.phy2log = matrix<int32_t>(0, num_physical);
    plan.logcnt = matrix<int32_t>(0, E);
    return plan;
  }
  matrix<int32_t> phyrank;
  if (hierarchical_policy)
    hierarchical(load, num_physical, num_groups, num_nodes, num_ranks, plan.phy2log, phyrank, plan.logcnt);
  else
    hierarchical(load, num_physical, 1, 1, num_ranks, plan.phy2log, phyrank, plan.logcnt);
  const int32_t max_count = *std::max_element(plan.logcnt.data.begin(), plan.logcnt.data.end());
  for (int64_t l = 0; l < load.rows; ++l) {
    matrix<int32_t> table(E, max_count, -1);
    for (int64_t p = 0; p < num_physical; ++p)
      table(plan.phy2log(l, p), phyrank(l, p)) = static_cast<int32_t>(p);
    plan.log2phy.push_back(std::move(table));
  }
  return plan;
}

std::vector<double> rank_loads(const expert_plan& plan, const matrix<double>& load, int64_t layer_idx,
                               int64_t num_ranks) {
  const int64_t per_rank = plan.phy2log.cols / num_ranks;
  std::vector<double> loads(static_cast<size_t>(num_ranks), 0.0);
  for (int64_t p = 0; p < plan.phy2log.cols; ++p) {
    const int32_t e = plan.phy2log(layer_idx, p);
    loads[p / per_rank] += load(layer_idx, e) / plan.logcnt(layer_idx, e);
  }
  return loads;
}

}  // namespace moe
