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

}  // namespace moe
