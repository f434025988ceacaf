// tools/sampling_options.cpp
#include "tools/sampling_options.hpp"

#include "config/model_config.hpp"
#include "tools/cli_checks.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/token_ids.hpp"

namespace moe::tools {

void add_sampling_options(CLI::App& cmd, sampling_flags& f) {
  sampling_params& p = f.params;
  cmd.add_option("--max-tokens", p.max_tokens, "tokens to generate at most")->capture_default_str();
  cmd.add_option("--temperature", p.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-p", p.top_p, "nucleus sampling mass, (0, 1]")->capture_default_str();
  cmd.add_option("--top-k", p.top_k, "keep the k most likely tokens (-1: all)")->capture_default_str();
  cmd.add_option("--min-p", p.min_p, "drop tokens below min_p * max prob")->capture_default_str();
  cmd.add_option("--seed", f.seed, "sampling seed (default: random)")->check(non_negative_integer);
  cmd.add_option("--repetition-penalty", p.repetition_penalty, "> 1 discourages repeats")
    ->capture_default_str();
  cmd.add_option("--presence-penalty", p.presence_penalty, "[-2, 2]")->capture_default_str();
  cmd.add_option("--frequency-penalty", p.frequency_penalty, "[-2, 2]")->capture_default_str();
  cmd.add_option("--stop", p.stop, "stop string (repeatable); not included in the output");
  cmd.add_option("--stop-token-ids", f.stop_token_ids, "token ids that end generation, e.g. 1,2")
    ->check(token_id_list);
  cmd.add_flag("--ignore-eos", p.ignore_eos, "keep generating after the EOS token");
}

sampling_params finish_sampling_options(const CLI::App& cmd, sampling_flags& f) {
  if (cmd.count("--seed"))
    f.params.seed = f.seed;
  if (!f.stop_token_ids.empty())
    f.params.stop_token_ids = parse_ids(f.stop_token_ids, "--stop-token-ids");
  if (const std::string err = validate(f.params); !err.empty())
    throw input_error(err);
  return f.params;
}

}  // namespace moe::tools
