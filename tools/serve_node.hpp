// tools/serve_node.hpp
// `moeserve serve --cluster FILE --node NAME`: one process of a multi-process cluster
// (config/cluster.toml), a node that runs ranks or the front node that joins them.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <csignal>
#include <memory>
#include <string>

#include "actors/cluster.hpp"
#include "config/cluster_file.hpp"

#include "tools/lib/model_session.hpp"

namespace moe::tools {

struct node_options {
  std::string cluster_file;
  std::string node;
};

/// Checks the cluster file and the model before loading, loads the weights, spawns the node's
/// ranks, publishes its gate on the node's address (nothing else is reachable without the
/// cluster's token), prints "moeserve: node NAME of cluster C on HOST:PORT (...)" and serves
/// until one of `signals` arrives.
void run_cluster_node(const node_options& o, const std::string& model_dir, const weight_options& weights,
                      bool reference, const sigset_t& signals);

/// The front node's cluster: joins every node of `c` that runs ranks as soon as it listens
/// (nodes start in any order; the ones still awaited are printed as each joins), then
/// spawns the queue, balancers and supervisor over their ranks on `sys` (actors/front_cluster.hpp)
/// and the watch that joins a lost node again (actors/node_watch.hpp).
/// Throws input_error when a node refuses or none answers within `timeout`.
[[nodiscard]] cluster join_cluster(caf::actor_system& sys, const cluster_file& c, const cluster_node& front,
                                   const model_config& model, std::shared_ptr<const tokenizer> tok,
                                   std::chrono::seconds timeout = std::chrono::seconds(600));

}  // namespace moe::tools
