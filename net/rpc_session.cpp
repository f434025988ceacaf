// net/rpc_session.cpp
// NOTE: everything here runs on the server's one io thread, except the replies' deliver(), which
// posts to it; the bridge actor only ever reaches a session through deliver().
#include "net/rpc_session.hpp"

#include <caf/send.hpp>
#include <algorithm>
#include <exception>
#include <map>
#include <string_view>
#include <utility>

#include "net/admin_config.hpp"
#include "net/admin_expert_load.hpp"
#include "net/admin_rebalance.hpp"
#include "net/rpc_methods.hpp"
#include "net/server_probes.hpp"
#include "net/serving_metrics.hpp"

namespace moe::net {
namespace {

constexpr uint32_t overloaded_retry_ms = 100;
constexpr uint32_t shutdown_retry_ms = 1000;              // another replica, or this one restarted
constexpr uint32_t bridge_lost_retry_ms = 100;            // a new bridge takes it at once
constexpr const char* bridge_kind = "connection_bridge";  // as the supervisor lists it
// ready / stats probes (each asks the cluster's actors) one connection may have unanswered: a
// client pipelining thousands of them would fill the request queue for everyone.
constexpr size_t max_probes_in_flight = 8;

/// tokenize's result: the prompt's token ids.
std::vector<int32_t> tokenize(const tokenize_request& req, const tokenizer& tok) {
  if (req.kind == prompt_kind::chat)
    return tok.encode(apply_chat_template(req.messages, req.add_generation_prompt));
  return tok.encode(req.prompt, req.add_special_tokens);
}

/// Another model's name.
std::optional<rpc_error> check_served(const generate_request& req, const serving_target& target) {
  if (!req.model.empty() && req.model != target.model_name)
    return make_error(rpc_errc::validation, "model: unknown \"" + req.model + "\" (this server serves \"" +
                                              target.model_name + "\")");
  return std::nullopt;
}

}  // namespace

rpc_session::rpc_session(std::shared_ptr<const server_shared> shared, std::weak_ptr<session_sink> sink)
    : shared_(std::move(shared)), sink_(std::move(sink)), role_(initial_role(shared_->keys)) {}

rpc_session::~rpc_session() { forget_in_flight(); }

void rpc_session::start() { start_bridge(); }

reply_fn rpc_session::replies(bool probe) {
  std::weak_ptr<rpc_session> weak = shared_from_this();
  return [weak, probe](msgpack::sbuffer bytes, std::optional<uint32_t> finished) {
    if (auto s = weak.lock())
      s->deliver(std::move(bytes), finished, probe);
  };
}

void rpc_session::close() {
  if (closed_)
    return;
  closed_ = true;
  forget_in_flight();
  if (bridge_)
    bridge_close(bridge_);
}

void rpc_session::shed(const rpc_error& error) {
  if (closed_)
    return;
  for (const uint32_t msgid : in_flight_)
    write(encode_error(msgid, error));
  forget_in_flight();  // a late answer of the cluster's is dropped
}

void rpc_session::write(msgpack::sbuffer bytes) {
  if (closed_)
    return;
  if (auto sink = sink_.lock())
    sink->write(std::move(bytes));
}

void rpc_session::start_bridge() {
  bridge_ = spawn_connection_bridge(
    shared_->sys, {.target = shared_->target, .counters = shared_->counters, .reply = replies()});
  if (const supervisor_actor& supervisor = shared_->target->handles.supervisor)  // listed, killable
    caf::anon_send(supervisor, attach_atom::value, std::string(bridge_kind), bridge_);
  std::weak_ptr<rpc_session> weak = shared_from_this();
  bridge_->attach_functor([weak, io = shared_->io, addr = bridge_.address()](const caf::error& reason) {
    asio::post(*io, [weak, addr, reason] {
      if (auto c = weak.lock())
        c->on_bridge_down(addr, reason);
    });
  });
}

void rpc_session::on_bridge_down(const caf::actor_addr& bridge, const caf::error& reason) {
  if (closed_ || bridge != bridge_.address() || !reason || reason == caf::exit_reason::normal)
    return;  // closing (it quits when done), or one replaced already
  // its sessions saw it go and freed what the cluster held: the generates it carried end here
  const rpc_error error = make_unavailable("generate: the connection's bridge to the cluster was lost (" +
                                             shared_->sys.render(reason) + ")",
                                           bridge_lost_retry_ms);
  count_failed(*shared_->counters, error.code, static_cast<int64_t>(in_flight_.size()));
  for (const uint32_t msgid : in_flight_)
    write(encode_error(msgid, error));
  forget_in_flight();
  if (!closed_)
    start_bridge();  // the connection goes on with a new one
}

void rpc_session::forget_in_flight() {
  shared_->counters->num_generates_in_flight -= static_cast<int64_t>(in_flight_.size());
  in_flight_.clear();
  shared_->counters->notify_request_ended();
}

void rpc_session::deliver(msgpack::sbuffer bytes, std::optional<uint32_t> finished, bool probe) {
  auto held = std::make_shared<msgpack::sbuffer>(std::move(bytes));
  asio::post(*shared_->io, [self = shared_from_this(), held, finished, probe] {
    if (probe)
      --self->probes_in_flight_;
    if (finished) {
      if (self->in_flight_.erase(*finished) == 0)
        return;  // answered already (shed at shutdown)
      --self->shared_->counters->num_generates_in_flight;
      self->shared_->counters->notify_request_ended();
    }
    self->write(std::move(*held));
  });
}

void rpc_session::handle(rpc_message& message) {
  if (auto* request = std::get_if<rpc_request>(&message))
    return handle_request(*request);
  if (auto* note = std::get_if<rpc_notification>(&message)) {
    if (note->method == "cancel") {  // [2, "cancel", [msgid]] needs no reply
      if (!may_call(role_, rpc_method::cancel))
        return write(encode_error_notification(unauthenticated(note->method)));
      auto msgid = parse_cancel(note->params);
      if (auto* id = std::get_if<uint32_t>(&msgid))
        return bridge_cancel(bridge_, *id);
      return write(encode_error_notification(std::get<rpc_error>(msgid)));
    }
    const bool known = find_method(note->method).has_value();
    return write(encode_error_notification(
      known
        ? make_error(rpc_errc::invalid_request, "method: \"" + note->method + "\" must be sent as a request")
        : unknown_method(note->method)));
  }
  if (std::holds_alternative<rpc_response>(message))
    return write(encode_error_notification(
      make_error(rpc_errc::invalid_request, "message: the server takes no responses")));
  auto& error = std::get<rpc_decode_error>(message);
  if (auto reply = encode_reply(error))
    write(std::move(*reply));
  if (error.close_connection)
    if (auto sink = sink_.lock())
      sink->close_after_writes();
}

void rpc_session::handle_request(rpc_request& request) {
  const uint32_t msgid = request.msgid;
  const std::optional<rpc_method> method = find_method(request.method);
  if (!method || (is_fault_injection_method(*method) && !shared_->fault_injection))
    return write(encode_error(msgid, unknown_method(request.method)));
  if (!may_call(role_, *method))
    return write(encode_error(msgid, is_admin_method(*method) && role_ != auth_role::none
                                       ? forbidden(request.method)
                                       : unauthenticated(request.method)));
  const serving_target& target = *shared_->target;
  try {
    switch (*method) {
      case rpc_method::generate: return handle_generate(request);
      case rpc_method::auth: return handle_auth(request);
      case rpc_method::cancel: {
        auto id = parse_cancel(request.params);
        if (auto* err = std::get_if<rpc_error>(&id))
          return write(encode_error(msgid, *err));
        const bool found = in_flight_.count(std::get<uint32_t>(id)) > 0;
        if (found)
          bridge_cancel(bridge_, std::get<uint32_t>(id));
        return write(encode_result(msgid, found));
      }
      case rpc_method::tokenize: {
        auto req = parse_tokenize(request.params, shared_->limits.requests);
        if (auto* err = std::get_if<rpc_error>(&req))
          return write(encode_error(msgid, *err));
        return write(encode_result(msgid, tokenize(std::get<tokenize_request>(req), *target.tok)));
      }
      case rpc_method::admin_kill: {
        auto req = parse_admin_kill(request.params);
        if (auto* err = std::get_if<rpc_error>(&req))
          return write(encode_error(msgid, *err));
        const auto& k = std::get<admin_kill_request>(req);
        return spawn_admin_kill(shared_->sys, shared_->target, msgid, k.kind, k.index, replies());
      }
      case rpc_method::admin_configure:
      case rpc_method::admin_drain:
      case rpc_method::admin_undrain: {
        auto req = *method == rpc_method::admin_configure
                     ? parse_admin_configure(request.params)
                     : parse_admin_drain(request.params, *method == rpc_method::admin_drain);
        if (auto* err = std::get_if<rpc_error>(&req))
          return write(encode_error(msgid, *err));
        return spawn_admin_configure(shared_->sys, shared_->target, msgid,
                                     std::get<admin_configure_request>(std::move(req)), replies());
      }
      case rpc_method::admin_rebalance: {
        auto roles = parse_admin_rebalance(request.params);
        if (auto* err = std::get_if<rpc_error>(&roles))
          return write(encode_error(msgid, *err));
        return spawn_admin_rebalance(shared_->sys, shared_->target, msgid,
                                     std::get<std::vector<std::string>>(std::move(roles)), replies());
      }
      case rpc_method::detokenize: {
        request_limits limits = shared_->limits.requests;
        // any id the model can produce: its vocabulary may be larger than the tokenizer's (V3:
        // 129280 against 128815), and decode skips ids without a token, as HF does
        limits.max_token_id = std::max<int64_t>(target.tok->vocab_size(), target.vocab_size) - 1;
        auto ids = parse_detokenize(request.params, limits);
        if (auto* err = std::get_if<rpc_error>(&ids))
          return write(encode_error(msgid, *err));
        return write(encode_result(msgid, target.tok->decode(std::get<std::vector<int32_t>>(ids))));
      }
      default: break;
    }
    if (auto err = check_no_params(request.params))
      return write(encode_error(msgid, *err));
    switch (*method) {
      case rpc_method::models: return write(encode_models(msgid, target));
      case rpc_method::admin_config:
        return spawn_admin_config(shared_->sys, shared_->target, msgid, replies());
      case rpc_method::admin_expert_load:
        return spawn_admin_expert_load(shared_->sys, shared_->target, msgid, replies());
      case rpc_method::admin_actors:
        return spawn_admin_actors(shared_->sys, shared_->target, msgid, replies());
      case rpc_method::health: return write(encode_health(msgid, *shared_->counters));
      case rpc_method::ready:
      case rpc_method::stats:
        if (probes_in_flight_ >= max_probes_in_flight)
          return write(
            encode_error(msgid, make_overloaded("connection: " + std::to_string(probes_in_flight_) +
                                                  " ready/stats requests in flight, the limit",
                                                overloaded_retry_ms)));
        ++probes_in_flight_;
        if (*method == rpc_method::ready)
          return spawn_ready_probe(shared_->sys, shared_->target, msgid, replies(/*probe=*/true));
        return spawn_stats_probe(shared_->sys, shared_->target, shared_->counters, msgid,
                                 replies(/*probe=*/true));
      default: return;
    }
  } catch (const std::exception& e) {  // a bug must not take the server down
    write(encode_error(msgid, make_error(rpc_errc::internal, request.method + ": " + e.what())));
  }
}

void rpc_session::handle_generate(rpc_request& request) {
  const uint32_t msgid = request.msgid;
  if (in_flight_.count(msgid) > 0)
    return write(encode_error(
      msgid, make_error(rpc_errc::invalid_request,
                        "msgid: " + std::to_string(msgid) + " is already in flight on this connection")));
  if (in_flight_.size() >= shared_->limits.max_in_flight)
    return write(encode_error(msgid, make_overloaded("connection: " + std::to_string(in_flight_.size()) +
                                                       " generate requests in flight, the limit",
                                                     overloaded_retry_ms)));
  if (shared_->counters->draining)
    return write(
      encode_error(msgid, make_unavailable("generate: the server is shutting down", shutdown_retry_ms)));
  auto req = parse_generate(request.params, shared_->limits.requests);
  if (auto* err = std::get_if<rpc_error>(&req))
    return write(encode_error(msgid, *err));
  if (auto err = check_served(std::get<generate_request>(req), *shared_->target))
    return write(encode_error(msgid, *err));
  in_flight_.insert(msgid);
  ++shared_->counters->num_generates_in_flight;
  bridge_generate(bridge_, msgid, std::move(std::get<generate_request>(req)),
                  std::chrono::steady_clock::now());
}

void rpc_session::handle_auth(rpc_request& request) {
  auto token = parse_auth(request.params);
  if (auto* err = std::get_if<rpc_error>(&token))
    return write(encode_error(request.msgid, *err));
  const auth_role granted = role_for(shared_->keys, std::get<std::string>(token));
  if (granted == auth_role::none) {
    write(encode_error(request.msgid, wrong_token()));
    if (++num_auth_failures_ >= shared_->limits.max_auth_failures)
      if (auto sink = sink_.lock())
        sink->close_after_writes();  // no more guesses on this connection
    return;
  }
  role_ = granted;
  write(encode_result(request.msgid, std::map<std::string, std::string_view>{{"role", role_name(role_)}}));
}

}  // namespace moe::net
