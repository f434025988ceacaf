// kernels/model/expert_parallel.cpp
// Dispatch, expert compute and combine of one MoE layer across an EP group.
#include "kernels/model/expert_parallel.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {

layer_placement make_layer_placement(std::vector<int32_t> slot_expert, int64_t num_ranks,
                                     int64_t num_logical) {
  const int64_t num_slots = static_cast<int64_t>(slot_expert.size());
  if (num_ranks < 1 || num_slots % num_ranks != 0 || num_slots < num_ranks)
    throw std::invalid_argument("expert placement: " + std::to_string(num_slots) +
                                " physical slots do not split evenly over " + std::to_string(num_ranks) +
                                " ranks");
  layer_placement p{.num_ranks = num_ranks,
                    .slots_per_rank = num_slots / num_ranks,
                    .slot_expert = std::move(slot_expert),
                    .expert_slots = {}};
  p.expert_slots.resize(static_cast<size_t>(num_logical));
  for (int64_t s = 0; s < num_slots; ++s) {
    const int32_t e = p.slot_expert[s];
    if (e < 0 || e >= num_logical)
      throw std::invalid_argument("expert placement: slot " + std::to_string(s) + " holds expert " +
                                  std::to_string(e) + ", outside [0, " + std::to_string(num_logical) + ")");
    p.expert_slots[e].push_back(static_cast<int32_t>(s));
  }
  for (int64_t e = 0; e < num_logical; ++e)
    if (p.expert_slots[e].empty())
      throw std::invalid_argument("expert placement: logical expert " + std::to_string(e) + " has no slot");
  return p;
}

layer_placement default_layer_placement(int64_t num_logical, int64_t num_redundant, int64_t num_ranks) {
  std::vector<int32_t> slots(static_cast<size_t>(num_logical + num_redundant));
  for (size_t s = 0; s < slots.size(); ++s)
    slots[s] = static_cast<int32_t>(static_cast<int64_t>(s) % num_logical);
  return make_layer_placement(std::move(slots), num_ranks, num_logical);
}

std::vector<layer_placement> placements_for_survivors(const std::vector<layer_placement>& first,
                                                      int64_t num_ranks) {
  if (num_ranks < 1)
    throw std::invalid_argument("a group of " + std::to_string(num_ranks) + " ranks");
  std::vector<layer_placement> out(first.size());
  for (size_t l = 0; l < first.size(); ++l) {
    if (first[l].slot_expert.empty())
      continue;
    const auto num_logical = static_cast<int64_t>(first[l].expert_slots.size());
    const auto num_slots = static_cast<int64_t>(first[l].slot_expert.size());
    const int64_t rounded = (num_slots + num_ranks - 1) / num_ranks * num_ranks;
    out[l] = default_layer_placement(num_logical, rounded - num_logical, num_ranks);
  }
  return out;
}

std::vector<int32_t> experts_of_rank(const layer_placement& p, int64_t rank) {
  const auto slots = std::span(p.slot_expert).subspan(rank * p.slots_per_rank, p.slots_per_rank);
  std::vector<int32_t> experts(slots.begin(), slots.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  return experts;
}

std::shared_ptr<const held_experts> hold_experts(const std::vector<layer_placement>& placements, int64_t rank,
                                                 const expert_source& source) {
  auto held = std::make_shared<held_experts>();
  held->layers.resize(placements.size());
  for (size_t l = 0; l < placements.size(); ++l) {
    const layer_placement& p = placements[l];
    if (p.slot_expert.empty())
      continue;
    std::vector<int32_t> experts = experts_of_rank(p, rank);
    std::vector<std::shared_ptr<const expert_copy>> copies;
    for (const int32_t e : experts) {
      copies.push_back(source(static_cast<int64_t>(l), e));
      if (copies.back() == nullptr)
        throw std::invalid_argument("rank " + std::to_string(rank) + " has no copy of expert " +
                                    std::to_string(e) + " of layer " + std::to_string(l));
    }
    held->layers[l] = make_held_layer(std::move(experts), std::move(copies),
                                      static_cast<int64_t>(p.expert_slots.size()));
  }
  return held;
}

std::shared_ptr<const held_experts> hold_experts_from(const model_weights& weights,
                                                      const std::vector<layer_placement>& placements,
                                                      int64_t rank) {
  return hold_experts(placements, rank, [&](int64_t l, int32_t e) -> std::shared_ptr<const expert_copy> {
    const auto& experts = weights.layers.at(static_cast<size_t>(l)).moe.experts;
    if (e < 0 || static_cast<size_t>(e) >= experts.size())
      return nullptr;
    return copy_expert(experts[static_cast<size_t>(e)]);
  });
}

std::vector<std::pair<int64_t, int32_t>> missing_experts(const held_experts& held,
                                                         const std::vector<layer_placement>& placements,
                                                         int64_t rank) {
  std::vector<std::pair<int64_t, int32_t>> missing;
  for (size_t l = 0; l < placements.size(); ++l) {
    if (placements[l].slot_expert.empty())
      continue;
    for (const int32_t e : experts_of_rank(placements[l], rank))
      if (held.find(static_cast<int64_t>(l), e) == nullptr)
        missing.emplace_back(static_cast<int64_t>(l), e);
  }
  return missing;
}

std::vector<std::shared_ptr<ep_dispatch>> make_dispatches(const layer_placement& placement, ep_key key,
                                                          int64_t src_rank, std::span<const float> x,
                                                          std::span<const int32_t> topk_ids,
                                                          std::span<const float> topk_weights,
                                                          int64_t num_tokens, int64_t hidden, int64_t top_k,
                                                          ep_precision ep, dispatch_plan& plan) {
  if (ep.combine == payload_dtype::fp8)
    throw std::invalid_argument("expert parallelism combines in bf16 or fp32, not fp8");
  const int64_t R = placement.num_ranks;
  plan = {.num_tokens = num_tokens,
          .top_k = top_k,
          .pair_dest = std::vector<int32_t>(static_cast<size_t>(num_tokens * top_k)),
          .pair_index = std::vector<int32_t>(static_cast<size_t>(num_tokens * top_k)),
          .pair_row = std::vector<int32_t>(static_cast<size_t>(num_tokens * top_k)),
          .sum = ep.sum};
  std::vector<std::shared_ptr<ep_dispatch>> out(static_cast<size_t>(R));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(R));  // rows per destination
  for (int64_t r = 0; r < R; ++r)
    out[r] = std::make_shared<ep_dispatch>(ep_dispatch{.key = key,
                                                       .src_rank = src_rank,
                                                       .rows = {},
                                                       .pair_row = {},
                                                       .pair_expert = {},
                                                       .pair_weight = {},
                                                       .combine_type = ep.combine,
                                                       .sum = ep.sum});
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t e = topk_ids[t * top_k + k];
      const auto& slots = placement.expert_slots[e];
      const int64_t slot = slots[static_cast<size_t>((t + src_rank) % static_cast<int64_t>(slots.size()))];
      const int64_t dest = placement.rank_of_slot(slot);
      ep_dispatch& d = *out[dest];
      std::vector<int32_t>& rows = tokens[dest];
      if (rows.empty() || rows.back() != t)
        rows.push_back(static_cast<int32_t>(t));
      plan.pair_dest[t * top_k + k] = static_cast<int32_t>(dest);
      plan.pair_index[t * top_k + k] = static_cast<int32_t>(d.pair_row.size());
      plan.pair_row[t * top_k + k] = static_cast<int32_t>(rows.size() - 1);
      d.pair_row.push_back(static_cast<int32_t>(rows.size() - 1));
      d.pair_expert.push_back(e);
      d.pair_weight.push_back(topk_weights[t * top_k + k]);
    }
  std::vector<float> gathered;
  for (int64_t r = 0; r < R; ++r) {
    const std::vector<int32_t>& rows = tokens[r];
    gathered.resize(rows.size() * static_cast<size_t>(hidden));
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(x.data() + rows[i] * hidden, hidden, gathered.data() + i * hidden);
    out[r]->rows = encode_rows(gathered.data(), static_cast<int64_t>(rows.size()), hidden, ep.dispatch);
  }
  return out;
}

std::vector<std::vector<size_t>> answer_groups(std::span<const std::shared_ptr<const ep_dispatch>> received,
                                               int64_t rank, int64_t slots_per_rank, int64_t split_min_rows) {
  std::vector<size_t> all(received.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  const bool split = std::any_of(received.begin(), received.end(),
                                 [&](const auto& d) { return d->src_rank != rank; }) &&
                     std::all_of(received.begin(), received.end(), [&](const auto& d) {
                       return d->src_rank == rank || d->num_pairs() >= split_min_rows * slots_per_rank;
                     });
  if (!split)
    return {all};
  // peers in ring order after this rank, then this rank (its src_rank - rank wraps to the end)
  const auto ring = [&](size_t i) {
    const int64_t n = static_cast<int64_t>(received.size());
    return ((received[i]->src_rank - rank - 1) % n + n) % n;
  };
  std::stable_sort(all.begin(), all.end(), [&](size_t a, size_t b) { return ring(a) < ring(b); });
  std::vector<std::vector<size_t>> groups;
  groups.reserve(all.size());
  for (const size_t i : all)
    groups.push_back({i});
  return groups;
}

std::vector<std::shared_ptr<ep_combine>> run_dispatched_experts(
  backend& device, const held_layer& held, int64_t rank,
  std::span<const std::shared_ptr<const ep_dispatch>> received, int64_t hidden) {
  int64_t num_pairs = 0;
  for (const auto& d : received)
    num_pairs += d->num_pairs();
  // every pair as its own row with top_k = 1, so each output row is one weighted expert output;
  // experts by their index among the held ones
  std::vector<float> x(static_cast<size_t>(num_pairs * hidden)), y(x.size()), rows;
  std::vector<int32_t> ids(static_cast<size_t>(num_pairs));
  std::vector<float> w(static_cast<size_t>(num_pairs));
  int64_t p = 0;
  bool round_bf16 = false;
  for (const auto& d : received) {
    rows.resize(static_cast<size_t>(d->rows.num_rows * hidden));
    decode_rows(d->rows, rows.data());
    round_bf16 = d->combine_type == payload_dtype::bf16;
    for (int64_t i = 0; i < d->num_pairs(); ++i, ++p) {
      const int32_t e = d->pair_expert[i];
      if (!held.holds(e))
        throw std::logic_error("expert parallelism: rank " + std::to_string(rank) +
                               " got a token for expert " + std::to_string(e) + ", which it does not hold");
      std::copy_n(rows.data() + d->pair_row[i] * hidden, hidden, x.data() + p * hidden);
      ids[p] = held.local[e];
      w[p] = d->pair_weight[i];
    }
  }
  if (num_pairs > 0)
    device.moe_experts({.x = x.data(),
                        .topk_ids = ids.data(),
                        .topk_weights = w.data(),
                        .out = y.data(),
                        .num_tokens = num_pairs,
                        .hidden = hidden,
                        .top_k = 1,
                        .experts = &held.weights,
                        .expert_begin = 0,
                        .expert_end = static_cast<int64_t>(held.weights.size()),
                        .round_outputs_bf16 = round_bf16});
  std::vector<std::shared_ptr<ep_combine>> answers;
  std::vector<float> sums;
  p = 0;
  for (const auto& d : received) {
    const float* pairs = y.data() + p * hidden;
    token_payload outputs;
    if (d->sum == combine_sum::per_pair) {
      outputs = encode_rows(pairs, d->num_pairs(), hidden, d->combine_type);
    } else {  // a row's pairs are in k order: sum them in that order
      sums.assign(static_cast<size_t>(d->rows.num_rows * hidden), 0.0f);
      for (int64_t i = 0; i < d->num_pairs(); ++i) {
        float* o = sums.data() + d->pair_row[i] * hidden;
        const float* yi = pairs + i * hidden;
        for (int64_t c = 0; c < hidden; ++c)
          o[c] += yi[c];
      }
      outputs = encode_rows(sums.data(), d->rows.num_rows, hidden,
                            d->src_rank == rank ? payload_dtype::fp32 : d->combine_type);
    }
    answers.push_back(std::make_shared<ep_combine>(
      ep_combine{.key = d->key, .src_rank = rank, .outputs = std::move(outputs)}));
    p += d->num_pairs();
  }
  return answers;
}

void combine_outputs(const dispatch_plan& plan, std::span<const std::shared_ptr<const ep_combine>> answers,
                     float* out, int64_t hidden) {
  std::vector<std::vector<float>> decoded(answers.size());
  for (size_t r = 0; r < answers.size(); ++r) {
    decoded[r].resize(static_cast<size_t>(answers[r]->outputs.num_rows * hidden));
    decode_rows(answers[r]->outputs, decoded[r].data());
  }
  const int64_t K = plan.top_k;
  auto add = [hidden](float* o, const float* y) {
    for (int64_t i = 0; i < hidden; ++i)
      o[i] += y[i];
  };
  for (int64_t t = 0; t < plan.num_tokens; ++t) {
    float* o = out + t * hidden;
    std::fill_n(o, hidden, 0.0f);
    if (plan.sum == combine_sum::per_pair) {
      for (int64_t k = 0; k < K; ++k)
        add(o, decoded[plan.pair_dest[t * K + k]].data() + plan.pair_index[t * K + k] * hidden);
      continue;
    }
    for (size_t r = 0; r < answers.size(); ++r)  // each rank t went to once, in rank order
      for (int64_t k = 0; k < K; ++k)
        if (plan.pair_dest[t * K + k] == static_cast<int32_t>(r)) {
          add(o, decoded[r].data() + plan.pair_row[t * K + k] * hidden);
          break;
        }
  }
}

}  // namespace moe
