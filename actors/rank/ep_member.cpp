// actors/rank/ep_member.cpp
#include "actors/rank/ep_member.hpp"

namespace moe {

std::shared_ptr<const std::vector<layer_placement>> default_placements(const model_weights& weights,
                                                                       int64_t num_ranks,
                                                                       int64_t num_redundant) {
  auto p = std::make_shared<std::vector<layer_placement>>(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l)
    if (weights.layers[l].is_moe)
      (*p)[l] = default_layer_placement(weights.config.n_routed_experts, num_redundant, num_ranks);
  return p;
}

placement_report report_placement(const ep_rank_core& core) {
  placement_report out{.epoch = core.placement_epoch(),
                       .slot_expert = {},
                       .membership_first_step = core.membership_first_step(),
                       .num_steps_run = core.num_steps_run()};
  if (const auto& p = core.group().placements)
    for (const layer_placement& l : *p)
      out.slot_expert.push_back(l.slot_expert);
  return out;
}

}  // namespace moe
