// net/admin_rebalance.cpp
#include "net/admin_rebalance.hpp"

#include <caf/event_based_actor.hpp>
#include <algorithm>
#include <chrono>
#include <span>

#include <msgpack.hpp>

#include "actors/expert_balancer.hpp"
#include "net/field_readers.hpp"
#include "net/rpc_frame.hpp"

namespace moe::net {

namespace {

// Three phases, each bounded by the balancer's rank timeout (5 s), and the plan itself.
constexpr auto rebalance_timeout = std::chrono::seconds(30);

void pack_report(msgpack::packer<msgpack::sbuffer>& pk, const rebalance_report& r) {
  pk.pack_map(9).pack("role").pack(r.role).pack("epoch").pack(r.epoch);
  pk.pack("moved_experts").pack(r.moved_experts).pack("moved_bytes").pack(r.moved_bytes);
  pk.pack("plain_moved_bytes").pack(r.plain_moved_bytes).pack("seconds").pack_double(r.seconds);
  pk.pack("balancedness_before").pack(r.balancedness_before);
  pk.pack("balancedness_after").pack(r.balancedness_after);
  pk.pack("error").pack(r.error);
}

struct gathered {
  std::vector<rebalance_report> reports;
  size_t pending = 0;
};

}  // namespace

std::variant<std::vector<std::string>, rpc_error> parse_admin_rebalance(const msgpack::object& params) {
  if (params.type != msgpack::type::ARRAY || params.via.array.size > 1)
    return make_error(rpc_errc::invalid_request, "params: expected [] or [{role}]");
  if (params.via.array.size == 0)
    return std::vector<std::string>{"prefill", "decode"};
  const msgpack::object& map = params.via.array.ptr[0];
  if (map.type != msgpack::type::MAP)
    return make_error(rpc_errc::invalid_request, "params: expected [] or [{role}]");
  std::string role;
  for (const msgpack::object_kv& kv : std::span(map.via.map.ptr, map.via.map.size)) {
    if (kv.key.type != msgpack::type::STR)
      return field_error("params", "string keys", kv.key);
    const std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
    if (key != "role")
      return make_error(rpc_errc::validation, printable(key) + ": unknown key (role)");
    if (maybe_error err = read_string(kv.val, "role", 16, role))
      return *err;
  }
  if (role != "prefill" && role != "decode")
    return make_error(rpc_errc::validation,
                      "role: expected prefill or decode, got \"" + printable(role) + "\"");
  return std::vector<std::string>{role};
}

void spawn_admin_rebalance(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                           uint32_t msgid, const std::vector<std::string>& roles, const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    auto g = std::make_shared<gathered>();
    g->pending = roles.size();
    const auto finish = [=] {
      std::sort(g->reports.begin(), g->reports.end(),
                [](const rebalance_report& a, const rebalance_report& b) { return a.role > b.role; });
      std::string errors;
      rebalance_report sum;
      bool any_ok = false;
      for (const rebalance_report& r : g->reports) {
        if (!r.error.empty()) {
          errors += (errors.empty() ? "" : "; ") + r.role + ": " + r.error;
          continue;
        }
        any_ok = true;
        sum.epoch = std::max(sum.epoch, r.epoch);
        sum.moved_experts += r.moved_experts;
        sum.moved_bytes += r.moved_bytes;
        sum.plain_moved_bytes += r.plain_moved_bytes;
        sum.seconds = std::max(sum.seconds, r.seconds);
      }
      if (!any_ok) {
        reply(encode_error(
                msgid, make_error(rpc_errc::unavailable,
                                  "admin.rebalance: " + (errors.empty() ? "no expert balancer" : errors))),
              std::nullopt);
        return;
      }
      msgpack::sbuffer out;
      msgpack::packer<msgpack::sbuffer> pk(out);
      pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(6);
      pk.pack("epoch").pack(sum.epoch).pack("moved_experts").pack(sum.moved_experts);
      pk.pack("moved_bytes").pack(sum.moved_bytes).pack("plain_moved_bytes").pack(sum.plain_moved_bytes);
      pk.pack("seconds").pack_double(sum.seconds);
      pk.pack("groups").pack_array(static_cast<uint32_t>(g->reports.size()));
      for (const rebalance_report& r : g->reports)
        pack_report(pk, r);
      reply(std::move(out), std::nullopt);
    };
    for (const std::string& role : roles) {
      auto one = [=](rebalance_report r) {
        r.role = role;
        g->reports.push_back(std::move(r));
        if (--g->pending == 0)
          finish();
      };
      const auto failed = [=](const std::string& why) { one(rebalance_report{.role = role, .error = why}); };
      self
        ->request(target->handles.supervisor, rebalance_timeout, lookup_atom::value,
                  std::string("expert_balancer"), int64_t{role == "prefill" ? 0 : 1})
        .then(
          [=](const caf::actor& balancer) {
            if (!balancer)
              return failed(
                "no expert balancer runs for it: it is restarting, or the model has no routed experts");
            self
              ->request(caf::actor_cast<expert_balancer_actor>(balancer), rebalance_timeout,
                        rebalance_atom::value)
              .then([=](const rebalance_report& r) { one(r); },
                    [=](const caf::error& e) { failed(self->system().render(e)); });
          },
          [=](const caf::error& e) { failed(self->system().render(e)); });
    }
  });
}

}  // namespace moe::net
