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

}  // namespace moe
