// tools/sampling_options.hpp
// vLLM's sampling parameters as command-line flags (generate, client, bench).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kernels/sampling/sampler.hpp"

namespace moe::tools {

struct sampling_flags {
  sampling_params params;
  std::string stop_token_ids;  // "1,2"
  uint64_t seed = 0;
};

/// Adds --max-tokens, --temperature, --top-p, --top-k, --min-p, --seed, --repetition-penalty,
/// --presence-penalty, --frequency-penalty, --stop (repeatable), --stop-token-ids, --ignore-eos.
void add_sampling_options(CLI::App& cmd, sampling_flags& flags);

/// The validated parameters; throws input_error naming the bad flag.
[[nodiscard]] sampling_params finish_sampling_options(const CLI::App& cmd, sampling_flags& flags);

}  // namespace moe::tools
