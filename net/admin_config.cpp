// net/admin_config.cpp
#include "net/admin_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <array>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "actors/errors.hpp"
#include "net/field_readers.hpp"
#include "net/rpc_frame.hpp"

namespace moe::net {

namespace {

constexpr auto admin_timeout = std::chrono::seconds(10);
constexpr size_t max_fields = 32;
constexpr size_t max_value_bytes = 64;
constexpr size_t max_list = 1024;
constexpr std::array<std::string_view, 4> targets = {"prefill_balancer", "decode_balancer", "expert_balancer",
                                                     "request_queue"};
// The expert balancer is one per EP group (index 0: prefill, 1: decode); a change goes to both.
constexpr int64_t num_expert_balancers = 2;

std::string_view key_of(const msgpack::object_kv& kv) {
  return kv.key.type == msgpack::type::STR ? std::string_view(kv.key.via.str.ptr, kv.key.via.str.size)
                                           : std::string_view();
}

const msgpack::object* single_map(const msgpack::object& params) {
  if (params.type != msgpack::type::ARRAY || params.via.array.size != 1 ||
      params.via.array.ptr[0].type != msgpack::type::MAP)
    return nullptr;
  return &params.via.array.ptr[0];
}

// A field's value as the targets take it.
maybe_error read_value(const msgpack::object& v, std::string_view key, config_value& out) {
  switch (v.type) {
    case msgpack::type::BOOLEAN: out = v.via.boolean; return std::nullopt;
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER: {
      int64_t i = 0;
      if (maybe_error err = read_int(v, key, std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max(), i))
        return err;
      out = i;
      return std::nullopt;
    }
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: out = v.via.f64; return std::nullopt;
    case msgpack::type::STR: {
      std::string s;
      if (maybe_error err = read_string(v, key, max_value_bytes, s))
        return err;
      out = std::move(s);
      return std::nullopt;
    }
    case msgpack::type::ARRAY: {
      if (v.via.array.size > max_list)
        return field_too_large(key, std::to_string(v.via.array.size) + " items", max_list);
      std::vector<int64_t> list;
      for (const msgpack::object& item : std::span(v.via.array.ptr, v.via.array.size)) {
        int64_t i = 0;
        if (maybe_error err = read_int(item, key, std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max(), i))
          return err;
        list.push_back(i);
      }
      out = std::move(list);
      return std::nullopt;
    }
    default: return field_error(key, "a boolean, number, string or list of integers", v);
  }
}

void pack_value(msgpack::packer<msgpack::sbuffer>& pk, const config_value& v) {
  std::visit(
    [&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, double>)
        pk.pack_double(x);
      else
        pk.pack(x);
    },
    v);
}

rpc_error from_cluster(const caf::error& e, caf::actor_system& sys, std::string_view method) {
  if (e == serve_errc::invalid)
    return make_error(rpc_errc::validation, error_text(e));
  return make_error(rpc_errc::unavailable, std::string(method) + ": " + sys.render(e));
}

}  // namespace

std::variant<admin_configure_request, rpc_error> parse_admin_configure(const msgpack::object& params) {
  const msgpack::object* map = single_map(params);
  if (map == nullptr)
    return make_error(rpc_errc::invalid_request, "params: expected [{target, field: value...}]");
  admin_configure_request req;
  bool has_target = false;
  for (const msgpack::object_kv& kv : std::span(map->via.map.ptr, map->via.map.size)) {
    const std::string_view key = key_of(kv);
    if (kv.key.type != msgpack::type::STR)
      return field_error("params", "string keys", kv.key);
    if (key == "target") {
      if (maybe_error err = read_string(kv.val, "target", max_value_bytes, req.target))
        return *err;
      has_target = true;
      continue;
    }
    if (req.change.size() == max_fields)
      return field_too_large("params", "more fields", max_fields);
    if (key.size() > max_value_bytes)
      return field_too_large("params", "a key of " + std::to_string(key.size()) + " bytes", max_value_bytes);
    config_field f{std::string(key), false};
    if (maybe_error err = read_value(kv.val, printable(key), f.value))
      return *err;
    req.change.push_back(std::move(f));
  }
  if (!has_target)
    return make_error(rpc_errc::validation, "target: missing");
  if (std::find(targets.begin(), targets.end(), req.target) == targets.end()) {
    std::string known;
    for (std::string_view t : targets)
      known += (known.empty() ? "" : ", ") + std::string(t);
    return make_error(rpc_errc::validation,
                      "target: expected one of " + known + ", got \"" + printable(req.target) + "\"");
  }
  if (req.change.empty())
    return make_error(rpc_errc::validation, "params: no field to change");
  return req;
}

std::variant<admin_configure_request, rpc_error> parse_admin_drain(const msgpack::object& params,
                                                                   bool drain) {
  const msgpack::object* map = single_map(params);
  if (map == nullptr)
    return make_error(rpc_errc::invalid_request, "params: expected [{role, rank}]");
  std::string role;
  int64_t rank = -1;
  for (const msgpack::object_kv& kv : std::span(map->via.map.ptr, map->via.map.size)) {
    const std::string_view key = key_of(kv);
    maybe_error err;
    if (key == "role")
      err = read_string(kv.val, "role", max_value_bytes, role);
    else if (key == "rank")
      err = read_int(kv.val, "rank", 0, std::numeric_limits<int32_t>::max(), rank);
    else
      return kv.key.type == msgpack::type::STR
               ? make_error(rpc_errc::validation, printable(key) + ": unknown key")
               : field_error("params", "string keys", kv.key);
    if (err)
      return *err;
  }
  if (role != "prefill" && role != "decode")
    return make_error(rpc_errc::validation,
                      "role: expected prefill or decode, got \"" + printable(role) + "\"");
  if (rank < 0)
    return make_error(rpc_errc::validation, "rank: missing");
  return admin_configure_request{role + "_balancer", {{drain ? "drain" : "undrain", rank}}};
}

void spawn_admin_configure(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                           uint32_t msgid, admin_configure_request req, const reply_fn& reply) {
  sys.spawn([=, req = std::move(req)](caf::event_based_actor* self) {
    const int64_t num_children = req.target == "expert_balancer" ? num_expert_balancers : 1;
    struct outcome {
      std::optional<versioned_config> accepted;
      std::optional<caf::error> refused;
      int64_t pending = 0;
    };
    auto o = std::make_shared<outcome>();
    o->pending = num_children;
    for (int64_t index = 0; index < num_children; ++index) {
      auto one = [=] {
        if (--o->pending > 0)
          return;
        if (o->refused)
          return reply(encode_error(msgid, from_cluster(*o->refused, self->system(), "admin.configure")),
                       std::nullopt);
        msgpack::sbuffer out;
        msgpack::packer<msgpack::sbuffer> pk(out);
        pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(2);
        pk.pack("target").pack(o->accepted->target).pack("epoch").pack(o->accepted->epoch);
        reply(std::move(out), std::nullopt);
      };
      self
        ->request(target->handles.supervisor, admin_timeout, configure_atom::value, req.target, index,
                  req.change)
        .then(
          [=](const versioned_config& v) {
            if (!o->accepted || o->accepted->epoch < v.epoch)
              o->accepted = v;
            one();
          },
          [=](caf::error& e) {
            if (!o->refused)
              o->refused = std::move(e);
            one();
          });
    }
  });
}

void spawn_admin_config(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                        const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(target->handles.supervisor, admin_timeout, config_atom::value)
      .then(
        [=](const std::vector<versioned_config>& all) {
          std::set<std::string> targets_seen;  // the second expert balancer: both take every change
          std::vector<const versioned_config*> shown;
          for (const versioned_config& v : all)
            if (targets_seen.insert(v.target).second)
              shown.push_back(&v);
          msgpack::sbuffer out;
          msgpack::packer<msgpack::sbuffer> pk(out);
          pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(
            static_cast<uint32_t>(shown.size()));
          for (const versioned_config* shown_one : shown) {
            const versioned_config& v = *shown_one;
            pk.pack(v.target).pack_map(static_cast<uint32_t>(v.fields.size() + 1));
            pk.pack("epoch").pack(v.epoch);
            for (const config_field& f : v.fields) {
              pk.pack(f.key);
              pack_value(pk, f.value);
            }
          }
          reply(std::move(out), std::nullopt);
        },
        [=](caf::error& e) {
          reply(encode_error(msgid, from_cluster(e, self->system(), "admin.config")), std::nullopt);
        });
  });
}

}  // namespace moe::net
