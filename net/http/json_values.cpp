// net/http/json_values.cpp
#include "net/http/json_values.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace moe::net {

std::variant<nlohmann::json, rpc_error> parse_json_body(std::string_view body, size_t max_depth) {
  // nesting first, by a scan that skips strings: nothing deep is built
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return make_error(rpc_errc::invalid_request,
                          "body: JSON nested deeper than " + std::to_string(max_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  nlohmann::json value = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded())
    return make_error(rpc_errc::invalid_request, "body: not valid JSON");
  return value;
}

void pack_json(msgpack::packer<msgpack::sbuffer>& pk, const nlohmann::json& value) {
  using value_t = nlohmann::json::value_t;
  switch (value.type()) {
    case value_t::null:
    case value_t::discarded: pk.pack_nil(); return;
    case value_t::boolean: pk.pack(value.get<bool>()); return;
    case value_t::number_integer: pk.pack(value.get<int64_t>()); return;
    case value_t::number_unsigned: pk.pack(value.get<uint64_t>()); return;
    case value_t::number_float: {
      const double d = value.get<double>();
      if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e15)
        pk.pack(static_cast<int64_t>(d));
      else
        pk.pack(d);
      return;
    }
    case value_t::string: pk.pack(value.get_ref<const std::string&>()); return;
    case value_t::binary: pk.pack_nil(); return;
    case value_t::array:
      pk.pack_array(static_cast<uint32_t>(value.size()));
      for (const nlohmann::json& item : value)
        pack_json(pk, item);
      return;
    case value_t::object:
      pk.pack_map(static_cast<uint32_t>(value.size()));
      for (const auto& [key, item] : value.items()) {
        pk.pack(key);
        pack_json(pk, item);
      }
      return;
  }
}

nlohmann::json to_json(const msgpack::object& value) {
  switch (value.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return value.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return value.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return value.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return value.via.f64;
    case msgpack::type::STR: return std::string(value.via.str.ptr, value.via.str.size);
    case msgpack::type::BIN: return std::string(value.via.bin.ptr, value.via.bin.size);
    case msgpack::type::ARRAY: {
      nlohmann::json out = nlohmann::json::array();
      for (const msgpack::object& item : std::span(value.via.array.ptr, value.via.array.size))
        out.push_back(to_json(item));
      return out;
    }
    case msgpack::type::MAP: {
      nlohmann::json out = nlohmann::json::object();
      for (const msgpack::object_kv& kv : std::span(value.via.map.ptr, value.via.map.size)) {
        const std::string key = kv.key.type == msgpack::type::STR
                                  ? std::string(kv.key.via.str.ptr, kv.key.via.str.size)
                                  : dump_json(to_json(kv.key));
        out[key] = to_json(kv.val);
      }
      return out;
    }
    default: return nullptr;
  }
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

rpc_error error_of(const msgpack::object& error_map) {
  rpc_error e{rpc_errc::internal, "internal: an error the server could not read", std::nullopt};
  if (error_map.type != msgpack::type::MAP)
    return e;
  for (const msgpack::object_kv& kv : std::span(error_map.via.map.ptr, error_map.via.map.size)) {
    if (kv.key.type != msgpack::type::STR)
      continue;
    const std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
    if (key == "code" && kv.val.type == msgpack::type::POSITIVE_INTEGER)
      e.code = static_cast<rpc_errc>(kv.val.via.u64);
    else if (key == "message" && kv.val.type == msgpack::type::STR)
      e.message.assign(kv.val.via.str.ptr, kv.val.via.str.size);
    else if (key == "retry_after_ms" && kv.val.type == msgpack::type::POSITIVE_INTEGER)
      e.retry_after_ms = static_cast<uint32_t>(std::min<uint64_t>(kv.val.via.u64, UINT32_MAX));
  }
  return e;
}

}  // namespace moe::net
