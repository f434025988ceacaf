// tools/lib/running_cluster.cpp
#include "tools/lib/running_cluster.hpp"

#include "actors/system_config.hpp"

namespace moe::tools {

namespace {

caf::actor_system_config& configured(caf::actor_system_config& cfg) {
  configure_actor_system(cfg);
  return cfg;
}

}  // namespace

running_cluster::running_cluster(std::shared_ptr<const model_weights> weights,
                                 std::shared_ptr<const tokenizer> tok, const cluster_config& cfg)
    : sys_(configured(cfg_)), cluster_(spawn_cluster(sys_, std::move(weights), std::move(tok), cfg)) {}

running_cluster::~running_cluster() { cluster_.stop(); }

}  // namespace moe::tools
