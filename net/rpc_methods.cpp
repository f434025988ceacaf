// net/rpc_methods.cpp
#include "net/rpc_methods.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <span>
#include <utility>

#include <msgpack.hpp>

#include "net/field_readers.hpp"
#include "net/prompt_fields.hpp"

namespace moe::net {
namespace {

constexpr std::array<std::pair<rpc_method, std::string_view>, 17> methods = {{
  {rpc_method::generate, "generate"},
  {rpc_method::cancel, "cancel"},
  {rpc_method::tokenize, "tokenize"},
  {rpc_method::detokenize, "detokenize"},
  {rpc_method::models, "models"},
  {rpc_method::health, "health"},
  {rpc_method::ready, "ready"},
  {rpc_method::stats, "stats"},
  {rpc_method::auth, "auth"},
  {rpc_method::admin_actors, "admin.actors"},
  {rpc_method::admin_kill, "admin.kill"},
  {rpc_method::admin_config, "admin.config"},
  {rpc_method::admin_configure, "admin.configure"},
  {rpc_method::admin_drain, "admin.drain"},
  {rpc_method::admin_undrain, "admin.undrain"},
  {rpc_method::admin_expert_load, "admin.expert_load"},
  {rpc_method::admin_rebalance, "admin.rebalance"},
}};

constexpr std::array<std::string_view, 9> killable_kinds = {
  "request_queue", "prefill_balancer", "decode_balancer", "expert_balancer",  "prefill_rank",
  "decode_rank",   "session",          "stats_sampler",   "connection_bridge"};

/// params must be an array of exactly one value; returns it.
const msgpack::object* single_param(const msgpack::object& params) {
  if (params.type != msgpack::type::ARRAY || params.via.array.size != 1)
    return nullptr;
  return &params.via.array.ptr[0];
}

rpc_error params_error(std::string_view expected) {
  return make_error(rpc_errc::invalid_request, "params: expected " + std::string(expected));
}

maybe_error read_tokenize_map(const msgpack::object& map, const request_limits& limits,
                              tokenize_request& req) {
  int num_prompts = 0;
  for (const msgpack::object_kv& kv : std::span(map.via.map.ptr, map.via.map.size)) {
    const std::string_view key = kv.key.type == msgpack::type::STR
                                   ? std::string_view(kv.key.via.str.ptr, kv.key.via.str.size)
                                   : std::string_view();
    maybe_error err;
    if (key == "prompt") {
      err = read_string(kv.val, "prompt", limits.max_prompt_bytes, req.prompt);
      req.kind = prompt_kind::text;
      ++num_prompts;
    } else if (key == "messages") {
      err = read_messages(kv.val, limits.max_messages, limits.max_prompt_bytes, req.messages);
      req.kind = prompt_kind::chat;
      ++num_prompts;
    } else if (key == "add_special_tokens") {
      err = read_bool(kv.val, key, req.add_special_tokens);
    } else if (key == "add_generation_prompt") {
      err = read_bool(kv.val, key, req.add_generation_prompt);
    } else {
      return kv.key.type == msgpack::type::STR
               ? make_error(rpc_errc::validation, printable(key) + ": unknown key")
               : field_error("params", "string keys", kv.key);
    }
    if (err)
      return err;
  }
  if (num_prompts != 1)
    return make_error(rpc_errc::validation, "prompt: give exactly one of prompt or messages");
  return std::nullopt;
}

}  // namespace

std::optional<rpc_method> find_method(std::string_view name) noexcept {
  for (const auto& [method, method_name] : methods)
    if (method_name == name)
      return method;
  return std::nullopt;
}

std::string_view method_name(rpc_method method) noexcept {
  return methods[static_cast<size_t>(method)].second;
}

rpc_error unknown_method(std::string_view name) {
  std::string known;
  for (const auto& [method, method_name] : methods)
    known += (known.empty() ? "" : ", ") + std::string(method_name);
  return make_error(rpc_errc::unknown_method, "method: unknown \"" + printable(name) + "\" (" + known + ")");
}

std::variant<uint32_t, rpc_error> parse_cancel(const msgpack::object& params) {
  const msgpack::object* msgid = single_param(params);
  if (!msgid)
    return params_error("[msgid]");
  int64_t value = 0;
  if (maybe_error err = read_int(*msgid, "msgid", 0, UINT32_MAX, value))
    return *err;
  return static_cast<uint32_t>(value);
}

std::variant<tokenize_request, rpc_error> parse_tokenize(const msgpack::object& params,
                                                         const request_limits& limits) {
  const msgpack::object* arg = single_param(params);
  tokenize_request req;
  if (arg && arg->type == msgpack::type::STR) {
    if (maybe_error err = read_string(*arg, "prompt", limits.max_prompt_bytes, req.prompt))
      return *err;
    return req;
  }
  if (!arg || arg->type != msgpack::type::MAP)
    return params_error("[\"text\"] or [ {map} ]");
  if (maybe_error err = read_tokenize_map(*arg, limits, req))
    return *err;
  return req;
}

std::variant<std::vector<int32_t>, rpc_error> parse_detokenize(const msgpack::object& params,
                                                               const request_limits& limits) {
  const msgpack::object* ids = single_param(params);
  if (!ids)
    return params_error("[[token ids]]");
  std::vector<int32_t> out;
  if (maybe_error err = read_token_ids(*ids, "input_ids", limits.max_input_ids, limits.max_token_id, out))
    return *err;
  return out;
}

std::variant<admin_kill_request, rpc_error> parse_admin_kill(const msgpack::object& params) {
  const msgpack::object* map = single_param(params);
  if (map == nullptr || map->type != msgpack::type::MAP)
    return params_error("[{kind, index}]");
  admin_kill_request req;
  bool has_kind = false;
  for (const msgpack::object_kv& kv : std::span(map->via.map.ptr, map->via.map.size)) {
    const std::string_view key = kv.key.type == msgpack::type::STR
                                   ? std::string_view(kv.key.via.str.ptr, kv.key.via.str.size)
                                   : std::string_view();
    maybe_error err;
    if (key == "kind") {
      err = read_string(kv.val, "kind", 64, req.kind);
      has_kind = true;
    } else if (key == "index") {
      // a session's index is its request id (a restarted queue's start at 2^40)
      err = read_int(kv.val, "index", 0, std::numeric_limits<int64_t>::max(), req.index);
    } else {
      return kv.key.type == msgpack::type::STR
               ? make_error(rpc_errc::validation, printable(key) + ": unknown key")
               : field_error("params", "string keys", kv.key);
    }
    if (err)
      return *err;
  }
  if (!has_kind)
    return make_error(rpc_errc::validation, "kind: missing");
  if (std::find(killable_kinds.begin(), killable_kinds.end(), req.kind) == killable_kinds.end()) {
    std::string known;
    for (std::string_view k : killable_kinds)
      known += (known.empty() ? "" : ", ") + std::string(k);
    return make_error(rpc_errc::validation,
                      "kind: expected one of " + known + ", got \"" + printable(req.kind) + "\"");
  }
  return req;
}

std::optional<rpc_error> check_no_params(const msgpack::object& params) {
  if (params.type == msgpack::type::ARRAY && params.via.array.size == 0)
    return std::nullopt;
  return params_error("[] (no params)");
}

}  // namespace moe::net
