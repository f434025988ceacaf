// tools/serve_node.hpp
// `moeserve serve --cluster FILE --node NAME` for a node that runs ranks: one process of a
// multi-process cluster (config/cluster.toml).
#pragma once

#include <csignal>
#include <string>

#include "tools/lib/model_session.hpp"

namespace moe::tools {

struct node_options {
  std::string cluster_file;
  std::string node;
};

/// Checks the cluster file and the model before loading, loads the weights, spawns the node's
/// ranks, publishes its gate on the node's address (nothing else is reachable without the
/// cluster's token), prints "moeserve: node NAME of cluster C on HOST:PORT (...)" and serves
/// until one of `signals` arrives. The front node's part is not built yet: an input_error says so.
void run_cluster_node(const node_options& o, const std::string& model_dir, const weight_options& weights,
                      bool reference, const sigset_t& signals);

}  // namespace moe::tools
