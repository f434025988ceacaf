// tools/lib/running_cluster.hpp
// An actor system with a cluster spawned on it, for the verbs that serve one: the cluster is
// stopped on every way out, because the actor system's destructor waits for every actor (a
// failed bind would otherwise hang the verb instead of exiting with the error).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <memory>

#include "actors/cluster.hpp"

namespace moe::tools {

class running_cluster {
 public:
  running_cluster(std::shared_ptr<const model_weights> weights, std::shared_ptr<const tokenizer> tok,
                  const cluster_config& cfg);
  ~running_cluster();
  running_cluster(const running_cluster&) = delete;
  running_cluster& operator=(const running_cluster&) = delete;

  [[nodiscard]] caf::actor_system& system() noexcept { return sys_; }
  [[nodiscard]] const cluster& handles() const noexcept { return cluster_; }

 private:
  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  cluster cluster_;
};

}  // namespace moe::tools
