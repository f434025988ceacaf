// actors/rank/ep_member.cpp
#include "actors/rank/ep_member.hpp"

#include <caf/sec.hpp>

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

caf::error inspect(caf::serializer& f, ep_membership& x) {
  bool has_placements = x.placements != nullptr;
  std::vector<layer_placement> placements = has_placements ? *x.placements : std::vector<layer_placement>{};
  return f(caf::meta::type_name("ep_membership"), x.peers, x.global_ranks, x.data_addresses, x.first_step,
           has_placements, placements, x.placement_epoch);
}

caf::error inspect(caf::deserializer& f, ep_membership& x) {
  bool has_placements = false;
  std::vector<layer_placement> placements;
  if (auto err = f(caf::meta::type_name("ep_membership"), x.peers, x.global_ranks, x.data_addresses,
                   x.first_step, has_placements, placements, x.placement_epoch))
    return err;
  if (x.global_ranks.size() != x.peers.size() ||
      (!x.data_addresses.empty() && x.data_addresses.size() != x.peers.size()) ||
      (has_placements && !consistent(placements)))
    return caf::make_error(caf::sec::invalid_argument);
  x.inboxes.assign(x.peers.size(), nullptr);
  x.placements = has_placements ? std::make_shared<const std::vector<layer_placement>>(std::move(placements))
                                : nullptr;
  return {};
}

}  // namespace moe
