// tools/expert_load_json.hpp
// The JSON forms operators plan with offline (as with DeepSeek's EPLB repository): an expert
// load matrix [num_moe_layers][num_logical_experts] (what `ctl expert-load` writes and
// `eplb-plan` reads) and a plan {"phy2log", "log2phy", "logcnt"} (what `eplb-plan` prints).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "actors/policy/eplb.hpp"

namespace moe::tools {

/// Reads a load matrix; `origin` names the source in errors. Throws input_error for text that
/// is not JSON, a value that is not an array of equally long arrays of numbers >= 0, or no
/// experts; an empty array is a model without MoE layers (no rows).
[[nodiscard]] matrix<double> parse_expert_load(std::string_view text, std::string_view origin);

/// The matrix as nested arrays (integers where a count is whole).
[[nodiscard]] nlohmann::json expert_load_json(const matrix<double>& load);

/// {"phy2log": [layer][slot], "log2phy": [layer][expert][replica] (-1 padded), "logcnt": [layer][expert]}.
[[nodiscard]] nlohmann::json expert_plan_json(const expert_plan& plan);

/// The shape eplb-plan needs, checked before planning; throws input_error naming the flag.
void check_plan_shape(const matrix<double>& load, int64_t num_replicas, int64_t num_groups, int64_t num_nodes,
                      int64_t num_ranks);

}  // namespace moe::tools
