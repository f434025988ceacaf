// actors/kernel_inspect.hpp
// How the kernels' plain types that messages carry serialize when a message crosses a process
// (CAF's middleman): real inspect functions, with a KV blob written as raw bytes (CAF's default
// writes a float vector one element at a time, ~15x slower: ../shared/TOOLCHAIN.md §3). The
// receiver must have the sender's byte order.
#pragma once

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>

#include "kernels/model/expert_parallel.hpp"
#include "kernels/model/kv_handoff.hpp"
#include "kernels/sampling/logprobs.hpp"
#include "kernels/sampling/sampler.hpp"

namespace moe {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logprob_entry& x) {
  return f(caf::meta::type_name("logprob_entry"), x.token_id, x.logprob);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.token_id, x.logprob, x.top);
}

/// The optional fields (seed, logprobs) travel as a flag and a value: CAF 0.17 has no std::optional.
caf::error inspect(caf::serializer& f, sampling_params& x);
caf::error inspect(caf::deserializer& f, sampling_params& x);

/// For to_string and other inspectors: the fields that are not optional.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  return f(caf::meta::type_name("sampling_params"), x.temperature, x.top_p, x.top_k, x.min_p,
           x.repetition_penalty, x.presence_penalty, x.frequency_penalty, x.max_tokens, x.stop_token_ids,
           x.stop, x.ignore_eos);
}

/// The shape, then data as one blob of num_layers x num_tokens x kv_dim floats.
caf::error inspect(caf::serializer& f, kv_pages& x);
caf::error inspect(caf::deserializer& f, kv_pages& x);

/// For to_string and other inspectors: the shape only.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_pages& x) {
  return f(caf::meta::type_name("kv_pages"), x.num_layers, x.num_tokens, x.kv_dim);
}

/// Encoded rows: the type as its one-byte value, the shape, then data and (FP8) scales as raw
/// blobs; a type, shape or blob size that does not fit together is refused.
caf::error inspect(caf::serializer& f, token_payload& x);
caf::error inspect(caf::deserializer& f, token_payload& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_payload& x) {
  return f(caf::meta::type_name("token_payload"), x.num_rows, x.dim);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ep_key& x) {
  return f(caf::meta::type_name("ep_key"), x.step, x.layer_idx, x.micro_batch);
}

/// A dispatch's pairs as raw blobs of one length each (refused when they differ, or when a pair
/// names a row the payload does not have); the combine's type and sum as their one-byte values.
caf::error inspect(caf::serializer& f, ep_dispatch& x);
caf::error inspect(caf::deserializer& f, ep_dispatch& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ep_dispatch& x) {
  return f(caf::meta::type_name("ep_dispatch"), x.key, x.src_rank, x.rows);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ep_combine& x) {
  return f(caf::meta::type_name("ep_combine"), x.key, x.src_rank, x.outputs);
}

/// Whether placements read from a peer are what make_layer_placement builds (a dense layer's
/// empty): their slots split evenly over their ranks and every expert's slot list is its own.
/// A receiver refuses anything else (caf::sec::invalid_argument) before it routes by them.
[[nodiscard]] bool consistent(const std::vector<layer_placement>& placements);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_placement& x) {
  return f(caf::meta::type_name("layer_placement"), x.num_ranks, x.slots_per_rank, x.slot_expert,
           x.expert_slots);
}

}  // namespace moe
