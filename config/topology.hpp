// config/topology.hpp
// The cluster topology: how many prefill and decode ranks, how they group into nodes, the
// scheduler's limits, the KV pool per rank, the EP communication settings, the link model and
// the fault-tolerance limits.
// Read from a TOML file (config/topology.toml documents every key), overridden by `moeserve`
// flags (tools/lib/topology_options.hpp), and validated once at the boundary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "config/link_spec.hpp"
#include "config/model_config.hpp"

namespace moe {

/// Link-model defaults from DeepEP's published H800 figures (docs/reference/deepseek-system.md §4.2).
/// Intra-node: NVLink, EP8 normal-kernel dispatch bottleneck bandwidth (153 GB/s) and EP8
/// low-latency dispatch (77 µs, NVLink allowed in LL kernels since 2025-05-23).
/// Inter-node: RDMA (CX7 400 Gb/s), EP16 normal-kernel bandwidth (43 GB/s) and EP16
/// low-latency dispatch (118 µs), the smallest cross-node group DeepEP reports.
inline constexpr link_spec default_intra_node_link{.latency_us = 77.0, .bandwidth_gb_s = 153.0};
inline constexpr link_spec default_inter_node_link{.latency_us = 118.0, .bandwidth_gb_s = 43.0};

/// The serving cluster. Field names follow SGLang's flags where it has one.
struct topology_config {
  int64_t prefill_ranks = 2;
  int64_t decode_ranks = 2;
  int64_t ranks_per_node = 8;           // ranks per node (link model: intra vs inter node)
  int64_t redundant_experts = 0;        // extra physical expert slots per EP group (EPLB replicas)
  std::string expert_balancer = "off";  // EPLB: hierarchical|global|off (opt-in, as SGLang's --enable-eplb)
  int64_t eplb_interval_steps = 1000;   // steps between rebalances (SGLang's default); 0: only when asked
  bool two_batch_overlap = true;
  int64_t chunked_prefill_size = 512;  // prefill tokens per sequence per step
  int64_t max_prefill_tokens = 4096;   // token budget of one prefill batch
  int64_t max_running_requests = 64;   // per decode rank
  int64_t max_queued_requests = 256;   // request queue bound ("overloaded" beyond)
  double new_token_ratio = 1.0;        // share of max_tokens a decode rank books KV for (SGLang's)
  int64_t kv_blocks = 256;             // per rank
  int64_t page_size = 64;              // tokens per KV block (SGLang: --page-size)
  int64_t max_context = 8192;          // prompt + generated tokens of one request
  std::string dispatch_dtype = "fp8";  // fp8|bf16|fp32; see combine_dtype()
  std::string combine = "exact";       // exact (per pair, topology-invariant) | reduced (DeepEP: per rank)
  int64_t threads_per_rank = 0;  // 0: auto, the usable cores split among the ranks (config/thread_split.hpp)
  bool pin_threads = false;      // each rank's threads on cores of their own (config/thread_split.hpp)
  bool link_model = false;       // off by default (tests); benchmarks turn it on
  link_spec intra_node = default_intra_node_link;
  link_spec inter_node = default_inter_node_link;
  std::string host = "127.0.0.1";
  int64_t port = 8765;
  int64_t http_port =
    -1;  // the HTTP front: -1 the port after `port` (any free one when port is 0 or 65535); 0 off
  // Fault tolerance. The defaults let a chaos test kill some actor every 0.3 s and still stop a
  // crash loop within a few seconds.
  int64_t max_restarts = 5;       // restarts of one actor within restart_period_s, then escalate
  double restart_period_s = 2.0;  // the window max_restarts counts over
  double stall_timeout_s = 30.0;  // a rank running requests without a step this long is killed; 0: never
  int64_t max_migrations = 3;     // placements again of one request after lost ranks, then 503

  bool operator==(const topology_config&) const = default;
};

/// Parses TOML text laid out as config/topology.toml; `origin` names the source in errors.
/// Absent keys keep their defaults. Throws input_error naming the origin, the key
/// ("prefill.ranks") and what was expected, on a syntax error, an unknown section or key, or a
/// value of the wrong type. Does not validate() ranges.
[[nodiscard]] topology_config parse_topology(std::string_view toml_text, std::string_view origin);

/// Reads and parses a TOML topology file (see parse_topology).
[[nodiscard]] topology_config load_topology(const std::filesystem::path& file);

/// Checks ranges and cross-field rules once; throws input_error naming the TOML key and the flag.
void validate(const topology_config& cfg);

/// The rules that need the model, for a cluster: each group's ranks split the routed experts
/// plus the redundant slots evenly. Cheap (config.json only): run before the weights load.
void validate_for_model(const topology_config& cfg, const model_config& model);

/// The longest request (prompt + output) a cluster of this topology serves for a model of
/// `model_context` positions: max_context, also bounded by one rank's KV pool.
[[nodiscard]] int64_t served_context(const topology_config& c, int64_t model_context) noexcept;

/// The combine payload type implied by the dispatch type: "fp32" for fp32, else "bf16".
[[nodiscard]] std::string_view combine_dtype(const topology_config& cfg) noexcept;

}  // namespace moe
