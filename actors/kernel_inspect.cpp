// actors/kernel_inspect.cpp
#include "actors/kernel_inspect.hpp"

#include <caf/sec.hpp>

#include <optional>

namespace moe {
namespace {

// A KV blob no decode rank could hold: a corrupt or hostile shape, refused before allocating.
constexpr uint64_t max_kv_floats = uint64_t{1} << 34;  // 64 GiB

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

}  // namespace moe
