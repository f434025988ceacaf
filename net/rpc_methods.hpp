// net/rpc_methods.hpp
// The methods the server answers, and the params of each but generate (generate_request.hpp),
// validated into plain values. Params shapes:
//   generate    [ {prompt | messages | input_ids, sampling names..., stream} ]
//   cancel      [msgid]                 a generate's msgid on the same connection
//   tokenize    ["text"] or [ {prompt | messages, add_special_tokens?, add_generation_prompt?} ]
//   detokenize  [[token ids]]
//   models, health, ready, stats   []
//   auth        [token]                 net/auth.hpp
//   admin.actors  []                    admin connections, a server with --fault-injection
//   admin.kill    [ {kind, index} ]     the same
//   admin.config, admin.configure, admin.drain, admin.undrain   admin connections
//                                       (net/admin_config.hpp)
//   admin.expert_load  []               admin connections (net/admin_expert_load.hpp)
//   admin.rebalance    [] or [{role}]   admin connections (net/admin_rebalance.hpp)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <msgpack/object_fwd.hpp>

#include "net/generate_request.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

enum class rpc_method : uint8_t {
  generate,
  cancel,
  tokenize,
  detokenize,
  models,
  health,
  ready,
  stats,
  auth,
  admin_actors,       // fault injection: the supervised actors
  admin_kill,         // fault injection: crash one
  admin_config,       // live configuration: every target's
  admin_configure,    // change one target's
  admin_drain,        // a rank takes no new work
  admin_undrain,      // it takes work again
  admin_expert_load,  // routed tokens per layer and expert (net/admin_expert_load.hpp)
  admin_rebalance,    // plan and install expert placements now (net/admin_rebalance.hpp)
};

/// Whether the server answers it only when started with --fault-injection (404 otherwise).
[[nodiscard]] constexpr bool is_fault_injection_method(rpc_method m) noexcept {
  return m == rpc_method::admin_actors || m == rpc_method::admin_kill;
}

/// Whether only an admin connection may call it (403 otherwise).
[[nodiscard]] constexpr bool is_admin_method(rpc_method m) noexcept {
  return is_fault_injection_method(m) || m == rpc_method::admin_config || m == rpc_method::admin_configure ||
         m == rpc_method::admin_drain || m == rpc_method::admin_undrain ||
         m == rpc_method::admin_expert_load || m == rpc_method::admin_rebalance;
}

[[nodiscard]] std::optional<rpc_method> find_method(std::string_view name) noexcept;
[[nodiscard]] std::string_view method_name(rpc_method method) noexcept;
/// 404: "method: unknown \"<name>\" (generate, cancel, ...)".
[[nodiscard]] rpc_error unknown_method(std::string_view name);

/// cancel's params: the msgid of the generate to cancel.
[[nodiscard]] std::variant<uint32_t, rpc_error> parse_cancel(const msgpack::object& params);

struct tokenize_request {
  prompt_kind kind = prompt_kind::text;  // text or chat
  std::string prompt;
  std::vector<chat_message> messages;
  bool add_special_tokens = true;     // text: prepend BOS
  bool add_generation_prompt = true;  // chat: end with the assistant's turn
};
[[nodiscard]] std::variant<tokenize_request, rpc_error> parse_tokenize(const msgpack::object& params,
                                                                       const request_limits& limits = {});

/// detokenize's params: at most max_input_ids ids in [0, max_token_id].
[[nodiscard]] std::variant<std::vector<int32_t>, rpc_error> parse_detokenize(
  const msgpack::object& params, const request_limits& limits = {});

/// admin.kill's params: the actor kind (request_queue, prefill_balancer, decode_balancer,
/// metrics, prefill_rank, decode_rank) and its index (>= 0).
struct admin_kill_request {
  std::string kind;
  int64_t index = 0;
};
[[nodiscard]] std::variant<admin_kill_request, rpc_error> parse_admin_kill(const msgpack::object& params);

/// models, health, ready and stats take no params: an error unless `params` is [].
[[nodiscard]] std::optional<rpc_error> check_no_params(const msgpack::object& params);

}  // namespace moe::net
