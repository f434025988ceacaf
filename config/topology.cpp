// config/topology.cpp
// Reads a TOML topology file (layout: config/topology.toml) into topology_config through one
// table of known keys, so an unknown key or a mistyped value is an error naming the key, and
// checks ranges and cross-field rules once in validate().
#include "config/topology.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

#include "config/model_config.hpp"
#include "config/toml_fields.hpp"

namespace moe {
namespace {

// Every TOML key, as "section.key", and the field of `c` it sets.
std::array<std::pair<std::string_view, field_ref>, 31> fields_of(topology_config& c) {
  return {{
    {"prefill.ranks", &c.prefill_ranks},
    {"prefill.chunked_prefill_size", &c.chunked_prefill_size},
    {"prefill.max_prefill_tokens", &c.max_prefill_tokens},
    {"decode.ranks", &c.decode_ranks},
    {"decode.max_running_requests", &c.max_running_requests},
    {"scheduler.max_queued_requests", &c.max_queued_requests},
    {"scheduler.max_context", &c.max_context},
    {"scheduler.new_token_ratio", &c.new_token_ratio},
    {"kv_cache.blocks", &c.kv_blocks},
    {"kv_cache.page_size", &c.page_size},
    {"cluster.ranks_per_node", &c.ranks_per_node},
    {"cluster.threads_per_rank", &c.threads_per_rank},
    {"cluster.pin_threads", &c.pin_threads},
    {"expert_parallel.redundant_experts", &c.redundant_experts},
    {"expert_parallel.balancer", &c.expert_balancer},
    {"expert_parallel.interval_steps", &c.eplb_interval_steps},
    {"expert_parallel.two_batch_overlap", &c.two_batch_overlap},
    {"expert_parallel.dispatch_dtype", &c.dispatch_dtype},
    {"expert_parallel.combine", &c.combine},
    {"link_model.enabled", &c.link_model},
    {"link_model.intra_node_latency_us", &c.intra_node.latency_us},
    {"link_model.intra_node_bandwidth_gb_s", &c.intra_node.bandwidth_gb_s},
    {"link_model.inter_node_latency_us", &c.inter_node.latency_us},
    {"link_model.inter_node_bandwidth_gb_s", &c.inter_node.bandwidth_gb_s},
    {"server.host", &c.host},
    {"server.port", &c.port},
    {"server.http_port", &c.http_port},
    {"fault_tolerance.max_restarts", &c.max_restarts},
    {"fault_tolerance.restart_period_s", &c.restart_period_s},
    {"fault_tolerance.stall_timeout_s", &c.stall_timeout_s},
    {"fault_tolerance.max_migrations", &c.max_migrations},
  }};
}

void read_section(topology_config& cfg, std::string_view section, const toml::table& table,
                  std::string_view origin) {
  const auto fields = fields_of(cfg);
  for (const auto& [key, node] : table) {
    const std::string name = std::string(section) + "." + std::string(key.str());
    auto it = std::find_if(fields.begin(), fields.end(), [&](auto& f) { return f.first == name; });
    if (it == fields.end())
      key_error(origin, node, name, "unknown key (see config/topology.toml)");
    assign(it->second, node, origin, name);
  }
}

bool known_section(std::string_view section) {
  topology_config scratch;
  for (const auto& [name, field] : fields_of(scratch))
    if (name.substr(0, name.find('.')) == section)
      return true;
  return false;
}

// "topology: <key> (<flag>) <what>"
[[noreturn]] void invalid(std::string_view key, std::string_view flag, std::string_view what) {
  std::ostringstream msg;
  msg << "topology: " << key << " (" << flag << ") " << what;
  throw input_error(msg.str());
}

void at_least(int64_t value, int64_t min, std::string_view key, std::string_view flag) {
  if (value < min)
    invalid(key, flag, "must be >= " + std::to_string(min) + ", got " + std::to_string(value));
}

// Upper bounds keep every product the runtime forms of these (ranks x requests, blocks x page x
// layers x dims, expert slots) inside int64 and every allocation sane: "unlimited" written as
// 2^63 - 1 must be an error, not an overflow that admits nothing.
void in_range(int64_t value, int64_t min, int64_t max, std::string_view key, std::string_view flag) {
  at_least(value, min, key, flag);
  if (value > max)
    invalid(key, flag, "must be <= " + std::to_string(max) + ", got " + std::to_string(value));
}

constexpr int64_t max_ranks = 1024;
constexpr int64_t max_count = int64_t{1} << 24;  // tokens, requests, expert slots
constexpr int64_t max_page_size = 4096;
constexpr int64_t max_kv_blocks = INT32_MAX;  // block ids are int32
constexpr double max_latency_us = 1e7;        // 10 s a message
constexpr double min_bandwidth_gb_s = 1e-3;   // 1 MB/s
constexpr double max_seconds = 1e7;           // any timeout or period

void check_link(const link_spec& link, std::string_view side) {
  const std::string prefix = "link_model." + std::string(side) + "_node_";
  const std::string flag = "--" + std::string(side) + "-node-";
  if (!std::isfinite(link.latency_us) || link.latency_us < 0.0 || link.latency_us > max_latency_us)
    invalid(prefix + "latency_us", flag + "latency-us",
            "must be a number in 0..1e7 (10 s), got " + std::to_string(link.latency_us));
  if (!std::isfinite(link.bandwidth_gb_s) || link.bandwidth_gb_s < 0.0 ||
      (link.bandwidth_gb_s > 0.0 && link.bandwidth_gb_s < min_bandwidth_gb_s))
    invalid(prefix + "bandwidth_gb_s", flag + "bandwidth-gbs",
            "must be 0 (unlimited) or a finite number >= 0.001, got " + std::to_string(link.bandwidth_gb_s));
}

}  // namespace

topology_config parse_topology(std::string_view toml_text, std::string_view origin) {
  const toml::table root = parse_toml(toml_text, origin);
  topology_config cfg;
  for (const auto& [section, node] : root) {
    if (!known_section(section.str()))
      key_error(origin, node, section.str(), "unknown section (see config/topology.toml)");
    if (!node.is_table())
      type_error(origin, node, section.str(), "a table ([" + std::string(section.str()) + "])");
    read_section(cfg, section.str(), *node.as_table(), origin);
  }
  return cfg;
}

topology_config load_topology(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw input_error(file.string() + ": cannot open the topology file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_topology(text.str(), file.string());
}

void validate(const topology_config& c) {
  in_range(c.prefill_ranks, 1, max_ranks, "prefill.ranks", "--prefill-ranks");
  in_range(c.decode_ranks, 1, max_ranks, "decode.ranks", "--decode-ranks");
  in_range(c.ranks_per_node, 1, max_ranks, "cluster.ranks_per_node", "--ranks-per-node");
  in_range(c.threads_per_rank, 0, 1024, "cluster.threads_per_rank", "--threads-per-rank");
  in_range(c.redundant_experts, 0, max_count, "expert_parallel.redundant_experts", "--redundant-experts");
  in_range(c.chunked_prefill_size, 1, max_count, "prefill.chunked_prefill_size", "--chunked-prefill-size");
  in_range(c.max_prefill_tokens, 1, max_count, "prefill.max_prefill_tokens", "--max-prefill-tokens");
  // A chunk larger than the batch budget could never be scheduled whole.
  if (c.max_prefill_tokens < c.chunked_prefill_size)
    invalid("prefill.max_prefill_tokens", "--max-prefill-tokens",
            "must be >= prefill.chunked_prefill_size (" + std::to_string(c.chunked_prefill_size) + "), got " +
              std::to_string(c.max_prefill_tokens));
  in_range(c.max_running_requests, 1, max_count, "decode.max_running_requests", "--max-running-requests");
  in_range(c.max_queued_requests, 1, max_count, "scheduler.max_queued_requests", "--max-queued-requests");
  in_range(c.max_context, 2, max_count, "scheduler.max_context", "--max-context");
  in_range(c.kv_blocks, 1, max_kv_blocks, "kv_cache.blocks", "--kv-blocks");
  in_range(c.page_size, 1, max_page_size, "kv_cache.page_size", "--page-size");
  if (c.kv_blocks * c.page_size < 2)
    invalid("kv_cache.blocks", "--kv-blocks",
            "times kv_cache.page_size must hold >= 2 tokens, got " +
              std::to_string(c.kv_blocks * c.page_size));
  if (c.dispatch_dtype != "fp8" && c.dispatch_dtype != "bf16" && c.dispatch_dtype != "fp32")
    invalid("expert_parallel.dispatch_dtype", "--dispatch-dtype",
            "must be fp8, bf16 or fp32, got \"" + c.dispatch_dtype + "\"");
  if (c.combine != "exact" && c.combine != "reduced")
    invalid("expert_parallel.combine", "--combine", "must be exact or reduced, got \"" + c.combine + "\"");
  if (c.expert_balancer != "hierarchical" && c.expert_balancer != "global" && c.expert_balancer != "off")
    invalid("expert_parallel.balancer", "--expert-balancer",
            "must be hierarchical, global or off, got \"" + c.expert_balancer + "\"");
  in_range(c.eplb_interval_steps, 0, max_count, "expert_parallel.interval_steps", "--eplb-interval");
  check_link(c.intra_node, "intra");
  check_link(c.inter_node, "inter");
  if (c.host.empty())
    invalid("server.host", "--host", "must not be empty");
  if (c.port < 0 || c.port > 65535)
    invalid("server.port", "--port", "must be in 0..65535, got " + std::to_string(c.port));
  if (c.http_port < -1 || c.http_port > 65535)
    invalid("server.http_port", "--http-port",
            "must be in 0..65535 (0: off) or -1 (the port after --port), got " + std::to_string(c.http_port));
  if (c.http_port > 0 && c.http_port == c.port)
    invalid("server.http_port", "--http-port", "must differ from --port " + std::to_string(c.port));
  if (!std::isfinite(c.new_token_ratio) || c.new_token_ratio <= 0.0 || c.new_token_ratio > 1.0)
    invalid("scheduler.new_token_ratio", "--new-token-ratio",
            "must be a number in (0, 1], got " + std::to_string(c.new_token_ratio));
  in_range(c.max_restarts, 0, max_count, "fault_tolerance.max_restarts", "--max-restarts");
  in_range(c.max_migrations, 0, max_count, "fault_tolerance.max_migrations", "--max-migrations");
  if (!std::isfinite(c.restart_period_s) || c.restart_period_s < 0.001 || c.restart_period_s > max_seconds)
    invalid("fault_tolerance.restart_period_s", "--restart-period",
            "must be a number of seconds in 0.001..1e7, got " + std::to_string(c.restart_period_s));
  if (!std::isfinite(c.stall_timeout_s) || c.stall_timeout_s < 0.0 || c.stall_timeout_s > max_seconds)
    invalid("fault_tolerance.stall_timeout_s", "--stall-timeout",
            "must be 0 (no watchdog) or a number of seconds up to 1e7, got " +
              std::to_string(c.stall_timeout_s));
}

void validate_for_model(const topology_config& c, const model_config& m) {
  const int64_t slots = m.n_routed_experts + c.redundant_experts;
  if (m.n_routed_experts == 0)
    return;
  for (const auto& [ranks, key, flag] : {std::tuple{c.prefill_ranks, "prefill.ranks", "--prefill-ranks"},
                                         std::tuple{c.decode_ranks, "decode.ranks", "--decode-ranks"}})
    if (slots % ranks != 0)
      invalid(key, flag,
              "must divide the model's " + std::to_string(m.n_routed_experts) + " routed experts + " +
                std::to_string(c.redundant_experts) +
                " redundant slots (expert_parallel.redundant_experts, "
                "--redundant-experts) = " +
                std::to_string(slots) + ", got " + std::to_string(ranks));
}

int64_t served_context(const topology_config& c, int64_t model_context) noexcept {
  return std::min({c.max_context, model_context, c.kv_blocks * c.page_size});
}

std::string_view combine_dtype(const topology_config& cfg) noexcept {
  return cfg.dispatch_dtype == "fp32" ? "fp32" : "bf16";
}

}  // namespace moe
