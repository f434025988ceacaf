// actors/policy/live_config.hpp
// The configuration an operator changes while the cluster serves: each target (the prefill and
// decode balancers, the expert balancers, the request queue) holds typed settings and an epoch that rises with every
// accepted change. A change is a list of key = value fields, validated whole against a copy:
// either every field applies or none does, and the error names the first field that does not
// fit. Pure functions; the actors that hold the settings apply them between two picks.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace moe {

/// A field's value as the wire and TOML give it (an integer also fills a real-valued field).
using config_value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;

struct config_field {
  std::string key;
  config_value value;
};

using config_fields = std::vector<config_field>;

/// What a target holds now: its name, epoch (0: as started) and every field.
struct versioned_config {
  std::string target;
  uint64_t epoch = 0;
  config_fields fields;
};

/// The value as text (for logs, errors and `ctl get`): true, 3, 0.5, "x", [1, 2].
[[nodiscard]] std::string to_string(const config_value& v);

/// The prefill balancer: which rank prefills each prompt.
///  - deepseek: the lowest of max(attention_weight x attention-cost share, token_weight x
///    token share) after adding the prompt (DeepSeek's two objectives);
///  - least_tokens: the fewest queued input tokens;
///  - round_robin: the next rank in turn.
/// Drained ranks get no new prompts (their running work finishes).
struct prefill_balancer_settings {
  std::string policy = "deepseek";
  double attention_weight = 1.0;
  double token_weight = 1.0;
  std::vector<int64_t> drained;  // ascending
  int64_t num_ranks = 1;         // fixed by the topology, not a field
};

/// The decode balancer: which rank decodes each request.
///  - deepseek: the lowest kv_weight x KV-usage share + request_weight x running-request share;
///  - power_of_two: two distinct random ranks with room (seeded by `seed`), the less loaded by
///    the deepseek score;
///  - round_robin: the next rank in turn that has room.
struct decode_balancer_settings {
  std::string policy = "deepseek";
  double kv_weight = 1.0;
  double request_weight = 1.0;
  int64_t seed = 0;
  std::vector<int64_t> drained;
  int64_t num_ranks = 1;
};

/// The request queue's admission limits (lowering one refuses new work, never drops any).
struct request_queue_settings {
  int64_t max_queued = 256;
  int64_t max_running = 64;
};

/// An expert-parallel group's expert balancer (EPLB): how it places expert replicas on ranks.
///  - hierarchical: DeepSeek's hierarchical policy (expert groups packed to nodes, replicas
///    inside nodes), global where the groups do not divide over the nodes (as eplb.py);
///  - global: one group, one node;
///  - off: the placement stays (admin.rebalance still plans with the hierarchical policy).
/// It plans every `interval_steps` steps of the group (0: only when asked) from the tokens
/// routed over the last `window_steps`, with at least `redundant_experts` extra slots (rounded
/// up so that every rank holds as many), keeping replicas where they are when
/// `minimal_movement`.
struct expert_balancer_settings {
  std::string policy = "hierarchical";
  int64_t interval_steps = 1000;  // SGLang's default
  int64_t window_steps = 1000;
  int64_t redundant_experts = 0;
  bool minimal_movement = true;
  int64_t num_logical = 1;  // the model's routed experts: not a field
};

/// `s` with `change` applied (fields in order; "drain" / "undrain" add or remove one rank of
/// "drained"), or the error naming the field: "<key>: ...". Applying fields_of(x) to any
/// settings of the same shape gives x.
[[nodiscard]] std::variant<prefill_balancer_settings, std::string> changed(const prefill_balancer_settings& s,
                                                                           const config_fields& change);
[[nodiscard]] std::variant<decode_balancer_settings, std::string> changed(const decode_balancer_settings& s,
                                                                          const config_fields& change);
[[nodiscard]] std::variant<request_queue_settings, std::string> changed(const request_queue_settings& s,
                                                                        const config_fields& change);
[[nodiscard]] std::variant<expert_balancer_settings, std::string> changed(const expert_balancer_settings& s,
                                                                          const config_fields& change);

[[nodiscard]] config_fields fields_of(const prefill_balancer_settings& s);
[[nodiscard]] config_fields fields_of(const decode_balancer_settings& s);
[[nodiscard]] config_fields fields_of(const request_queue_settings& s);
[[nodiscard]] config_fields fields_of(const expert_balancer_settings& s);

/// Whether rank `r` takes new work.
[[nodiscard]] bool takes_work(const std::vector<int64_t>& drained, int64_t r);

}  // namespace moe
