// tools/lib/topology_options.hpp
// The cluster topology as command-line flags (serve, bench): `--config FILE` is read first, then
// every flag given overrides it. SGLang's flag spellings where it has one.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "config/topology.hpp"

namespace moe::tools {

/// One member per flag; empty when the flag was not given.
struct topology_options {
  std::string config_file;  // --config; empty: built-in defaults
  std::optional<int64_t> prefill_ranks, decode_ranks, ranks_per_node, redundant_experts;
  std::optional<std::string> two_batch_overlap;  // "on" | "off"
  bool enable_two_batch_overlap = false;         // SGLang's plain flag: same as "on"
  std::optional<int64_t> chunked_prefill_size, max_prefill_tokens, max_running_requests, max_queued_requests,
    kv_blocks, page_size, max_context, threads_per_rank;
  std::optional<std::string> dispatch_dtype, combine, expert_balancer;
  std::optional<int64_t> eplb_interval_steps;
  std::optional<std::string> link_model;   // "on" | "off"
  std::optional<std::string> pin_threads;  // "on" | "off"
  std::optional<double> intra_node_latency_us, intra_node_bandwidth_gb_s;
  std::optional<double> inter_node_latency_us, inter_node_bandwidth_gb_s;
  std::optional<double> new_token_ratio;
  std::optional<int64_t> max_restarts, max_migrations;
  std::optional<double> restart_period_s, stall_timeout_s;
  std::optional<std::string> host;
  std::optional<int64_t> port;
  std::optional<int64_t> http_port;
};

/// Adds --config and the topology flags listed in config/topology.toml; --host and --port only
/// with `listen` (serve: the other verbs listen on nothing).
void add_topology_options(CLI::App& app, topology_options& opts, bool listen = false);

/// The file (or the defaults), overridden by the flags given, validated; throws input_error.
[[nodiscard]] topology_config resolve_topology(const topology_options& opts);

}  // namespace moe::tools
