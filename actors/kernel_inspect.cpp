// actors/kernel_inspect.cpp
#include "actors/kernel_inspect.hpp"

#include <caf/sec.hpp>

#include <algorithm>
#include <stdexcept>
#include <optional>

namespace moe {
namespace {

// A KV blob no decode rank could hold: a corrupt or hostile shape, refused before allocating.
constexpr uint64_t max_kv_floats = uint64_t{1} << 34;  // 64 GiB
// Rows x channels of one EP payload: far above any step's tokens x hidden.
constexpr uint64_t max_payload_elements = uint64_t{1} << 34;

uint64_t element_bytes(payload_dtype t) {
  return t == payload_dtype::fp8 ? 1 : t == payload_dtype::bf16 ? 2 : 4;
}

template <class T>
caf::error save_raw(caf::serializer& f, std::vector<T>& v) {
  uint64_t n = v.size();
  if (auto err = f(n))
    return err;
  return n > 0 ? f.apply_raw(n * sizeof(T), v.data()) : caf::error{};
}

template <class T>
caf::error load_raw(caf::deserializer& f, std::vector<T>& v, uint64_t max) {
  uint64_t n = 0;
  if (auto err = f(n))
    return err;
  if (n > max)
    return caf::make_error(caf::sec::invalid_argument);
  v.resize(n);
  return n > 0 ? f.apply_raw(n * sizeof(T), v.data()) : caf::error{};
}

}  // namespace

caf::error inspect(caf::serializer& f, sampling_params& x) {
  bool has_seed = x.seed.has_value(), has_logprobs = x.logprobs.has_value();
  uint64_t seed = x.seed.value_or(0);
  int32_t logprobs = x.logprobs.value_or(0);
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_p, x.top_k, x.min_p,
           x.repetition_penalty, x.presence_penalty, x.frequency_penalty, has_seed, seed, x.max_tokens,
           x.stop_token_ids, x.stop, x.ignore_eos, has_logprobs, logprobs);
}

caf::error inspect(caf::deserializer& f, sampling_params& x) {
  bool has_seed = false, has_logprobs = false;
  uint64_t seed = 0;
  int32_t logprobs = 0;
  if (auto err = f(caf::meta::type_name("sampling_params"), x.temperature, x.top_p, x.top_k, x.min_p,
                   x.repetition_penalty, x.presence_penalty, x.frequency_penalty, has_seed, seed,
                   x.max_tokens, x.stop_token_ids, x.stop, x.ignore_eos, has_logprobs, logprobs))
    return err;
  x.seed = has_seed ? std::optional<uint64_t>(seed) : std::nullopt;
  x.logprobs = has_logprobs ? std::optional<int32_t>(logprobs) : std::nullopt;
  return {};
}

bool consistent(const std::vector<layer_placement>& placements) {
  for (const layer_placement& p : placements) {
    if (p.slot_expert.empty() && p.expert_slots.empty())
      continue;  // a dense layer
    try {
      const layer_placement rebuilt = make_layer_placement(p.slot_expert, p.num_ranks,
                                                           static_cast<int64_t>(p.expert_slots.size()));
      if (rebuilt.slots_per_rank != p.slots_per_rank || rebuilt.expert_slots != p.expert_slots)
        return false;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }
  return true;
}

caf::error inspect(caf::serializer& f, kv_pages& x) {
  const uint64_t n = x.data.size();
  if (auto err = f(caf::meta::type_name("kv_pages"), x.num_layers, x.num_tokens, x.kv_dim, n))
    return err;
  return n > 0 ? f.apply_raw(n * sizeof(float), x.data.data()) : caf::error{};
}

caf::error inspect(caf::deserializer& f, kv_pages& x) {
  uint64_t n = 0;
  if (auto err = f(caf::meta::type_name("kv_pages"), x.num_layers, x.num_tokens, x.kv_dim, n))
    return err;
  if (x.num_layers < 0 || x.num_tokens < 0 || x.kv_dim < 0 || n > max_kv_floats ||
      static_cast<unsigned __int128>(x.num_layers) * static_cast<unsigned __int128>(x.num_tokens) *
          static_cast<unsigned __int128>(x.kv_dim) !=
        n)
    return caf::make_error(caf::sec::invalid_argument);
  x.data.resize(n);
  return n > 0 ? f.apply_raw(n * sizeof(float), x.data.data()) : caf::error{};
}

caf::error inspect(caf::serializer& f, token_payload& x) {
  auto type = static_cast<uint8_t>(x.type);
  if (auto err = f(caf::meta::type_name("token_payload"), type, x.num_rows, x.dim))
    return err;
  if (auto err = save_raw(f, x.data))
    return err;
  return save_raw(f, x.scales);
}

caf::error inspect(caf::deserializer& f, token_payload& x) {
  uint8_t type = 0;
  if (auto err = f(caf::meta::type_name("token_payload"), type, x.num_rows, x.dim))
    return err;
  if (type > static_cast<uint8_t>(payload_dtype::fp32) || x.num_rows < 0 || x.dim < 0 ||
      static_cast<unsigned __int128>(x.num_rows) * static_cast<unsigned __int128>(x.dim) >
        max_payload_elements)
    return caf::make_error(caf::sec::invalid_argument);
  x.type = static_cast<payload_dtype>(type);
  const uint64_t elements = static_cast<uint64_t>(x.num_rows) * static_cast<uint64_t>(x.dim);
  const uint64_t blocks = x.type == payload_dtype::fp8
                            ? static_cast<uint64_t>(x.num_rows) *
                                static_cast<uint64_t>((x.dim + payload_block - 1) / payload_block)
                            : 0;
  if (auto err = load_raw(f, x.data, elements * element_bytes(x.type)))
    return err;
  if (auto err = load_raw(f, x.scales, blocks))
    return err;
  if (x.data.size() != elements * element_bytes(x.type) || x.scales.size() != blocks)
    return caf::make_error(caf::sec::invalid_argument);
  return {};
}

caf::error inspect(caf::serializer& f, ep_dispatch& x) {
  auto combine_type = static_cast<uint8_t>(x.combine_type);
  auto sum = static_cast<uint8_t>(x.sum);
  if (auto err = f(caf::meta::type_name("ep_dispatch"), x.key, x.src_rank, x.rows, combine_type, sum))
    return err;
  if (auto err = save_raw(f, x.pair_row))
    return err;
  if (auto err = save_raw(f, x.pair_expert))
    return err;
  return save_raw(f, x.pair_weight);
}

caf::error inspect(caf::deserializer& f, ep_dispatch& x) {
  uint8_t combine_type = 0, sum = 0;
  if (auto err = f(caf::meta::type_name("ep_dispatch"), x.key, x.src_rank, x.rows, combine_type, sum))
    return err;
  if (combine_type > static_cast<uint8_t>(payload_dtype::fp32) ||
      sum > static_cast<uint8_t>(combine_sum::per_rank))
    return caf::make_error(caf::sec::invalid_argument);
  x.combine_type = static_cast<payload_dtype>(combine_type);
  x.sum = static_cast<combine_sum>(sum);
  const uint64_t max_pairs = max_payload_elements;
  if (auto err = load_raw(f, x.pair_row, max_pairs))
    return err;
  if (auto err = load_raw(f, x.pair_expert, max_pairs))
    return err;
  if (auto err = load_raw(f, x.pair_weight, max_pairs))
    return err;
  if (x.pair_expert.size() != x.pair_row.size() || x.pair_weight.size() != x.pair_row.size() ||
      std::any_of(x.pair_row.begin(), x.pair_row.end(),
                  [&](int32_t r) { return r < 0 || r >= x.rows.num_rows; }))
    return caf::make_error(caf::sec::invalid_argument);
  return {};
}

}  // namespace moe
