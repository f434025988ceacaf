// net/http/wire_values.cpp
#include "net/http/wire_values.hpp"

namespace moe::net {

const msgpack::object* find_key(const msgpack::object& map, std::string_view key) {
  for (const msgpack::object_kv& kv : map_items(&map))
    if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  return nullptr;
}

std::span<const msgpack::object> array_items(const msgpack::object* array) {
  if (!array || array->type != msgpack::type::ARRAY)
    return {};
  return {array->via.array.ptr, array->via.array.size};
}

std::span<const msgpack::object_kv> map_items(const msgpack::object* map) {
  if (!map || map->type != msgpack::type::MAP)
    return {};
  return {map->via.map.ptr, map->via.map.size};
}

std::string text_of(const msgpack::object* value) {
  if (!value || value->type != msgpack::type::STR)
    return {};
  return {value->via.str.ptr, value->via.str.size};
}

int64_t integer_of(const msgpack::object* value) {
  if (!value)
    return 0;
  if (value->type == msgpack::type::POSITIVE_INTEGER)
    return static_cast<int64_t>(value->via.u64);
  if (value->type == msgpack::type::NEGATIVE_INTEGER)
    return value->via.i64;
  return 0;
}

double number_of(const msgpack::object* value) {
  if (value && (value->type == msgpack::type::FLOAT32 || value->type == msgpack::type::FLOAT64))
    return value->via.f64;
  return static_cast<double>(integer_of(value));
}

}  // namespace moe::net
