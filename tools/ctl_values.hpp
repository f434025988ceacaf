// tools/ctl_values.hpp
// What `moeserve ctl` reads from its command line and files, and prints: KEY=VALUE assignments
// and TOML tables as live-configuration changes, and MessagePack replies as JSON.
#pragma once

#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "actors/policy/live_config.hpp"

namespace moe::tools {

/// KEY=VALUE with VALUE true|false, an integer, a number, a list of integers ("1,2", "[1, 2]",
/// "[]") or else a string. Throws input_error naming the argument when there is no "=" or no key.
[[nodiscard]] config_field parse_assignment(std::string_view arg);

/// One admin.configure change per table of a TOML text ([prefill_balancer], [decode_balancer],
/// [expert_balancer], [request_queue]: the targets the server checks), in the file's order;
/// values booleans, integers, floats, strings or arrays of integers. Throws input_error naming
/// `origin`, the line and the key for anything else.
struct target_change {
  std::string target;
  config_fields fields;
};
[[nodiscard]] std::vector<target_change> parse_config_toml(std::string_view text, std::string_view origin);

/// Packs [ {target, key: value...} ] (admin.configure's params).
void pack_change(msgpack::packer<msgpack::sbuffer>& pk, const target_change& change);

/// A MessagePack value as JSON (maps with string keys, arrays, scalars; binary as an array of
/// bytes, a non-string key as its JSON text).
[[nodiscard]] nlohmann::json to_json(const msgpack::object& o);

}  // namespace moe::tools
