// config/cluster_file.hpp
// A multi-process cluster: which OS processes ("nodes") take part, where each listens, and what
// each hosts (the front end, prefill ranks, decode ranks). Read from a TOML file
// (config/cluster.toml documents every key and is a loopback example), validated once before
// anything starts, so that a wrong file is one error naming the file, the node and the key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.hpp"
#include "config/topology.hpp"

namespace moe {

/// One process of a cluster.
struct cluster_node {
  std::string name;
  std::string host = "127.0.0.1";  // the address it binds and peers reach it at
  int64_t port = 0;                // its control-plane port (CAF's middleman); 1..65535
  bool front = false;              // request queue, sessions, balancers, the wire and HTTP fronts
  int64_t rpc_port = 8765;         // front only: MessagePack-RPC (--port overrides)
  int64_t http_port = -1;          // front only: HTTP, as server.http_port (--http-port overrides)
  int64_t prefill_ranks = 0;
  int64_t decode_ranks = 0;

  bool operator==(const cluster_node&) const = default;
};

/// The whole cluster, as every node reads it.
struct cluster_file {
  std::string name;                   // peers presenting another cluster's name are refused
  std::string token;                  // shared secret; MOESERVE_CLUSTER_TOKEN overrides the file's
  double heartbeat_interval_s = 0.1;  // middleman heartbeats between connected nodes
  double connection_timeout_s = 1.0;  // a node silent this long is down (its actors too)
  std::string data_plane = "auto";    // what carries EP payloads between processes: "ucx",
                                      // "middleman" (as messages), "nccl" (a CUDA device per
                                      // rank), or "auto" (ucx where built)
  std::string topology_file;          // optional: a topology file (relative to this file) for the
                                      // scheduler, KV, EP and fault-tolerance keys
  std::vector<cluster_node> nodes;    // in file order: ranks are numbered in this order
  topology_config topology;           // the topology file's (or the defaults), with the rank
                                      // counts the nodes add up to and the front's ports

  bool operator==(const cluster_file&) const = default;
};

/// The environment variable whose value, when set and not empty, replaces the file's token.
inline constexpr std::string_view cluster_token_env = "MOESERVE_CLUSTER_TOKEN";

/// Parses TOML text laid out as config/cluster.toml; `origin` names the source in errors.
/// Throws input_error naming the origin, line and key on a syntax error, an unknown key or a
/// mistyped value. Does not read the topology file, apply the token variable or validate.
[[nodiscard]] cluster_file parse_cluster(std::string_view toml_text, std::string_view origin);

/// Reads `file`, its topology file if it names one, takes the token from the environment when
/// set, totals the ranks into the topology and validates the whole (validate_cluster).
[[nodiscard]] cluster_file load_cluster(const std::filesystem::path& file);

/// The rules: at least one node, names unique and made of [A-Za-z0-9._-], every address
/// (control ports, and the front's wire and HTTP ports) used once per host, exactly one front
/// node, every node hosting something, at least one prefill and one decode rank in all, a
/// token, a heartbeat shorter than the timeout, and the topology's own rules. Throws
/// input_error starting with `origin`.
void validate_cluster(const cluster_file& c, std::string_view origin);

/// The rules that need the model: each group's ranks, over all nodes, split the routed experts
/// plus the redundant slots evenly; the error names the nodes that host the group.
void validate_cluster_for_model(const cluster_file& c, const model_config& model, std::string_view origin);

/// The node called `name`; an input_error listing the file's node names when none is.
[[nodiscard]] const cluster_node& find_node(const cluster_file& c, std::string_view name);

/// The front node (validate_cluster made sure there is exactly one).
[[nodiscard]] const cluster_node& front_node(const cluster_file& c);

/// The global index, within its role, of the first prefill / decode rank of node `i` (ranks
/// are numbered over the nodes in file order).
[[nodiscard]] int64_t first_prefill_rank(const cluster_file& c, size_t i);
[[nodiscard]] int64_t first_decode_rank(const cluster_file& c, size_t i);

}  // namespace moe
