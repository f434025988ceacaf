// net/http/wire_values.hpp
// Lenient reads of the wire's own answers (result maps, notifications) for rendering them as
// JSON or Prometheus text: a missing key or another type reads as empty or zero, since the
// server wrote these values itself and the validation is at the boundary, not here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <msgpack.hpp>

namespace moe::net {

/// The value of `key` in a map, or null.
[[nodiscard]] const msgpack::object* find_key(const msgpack::object& map, std::string_view key);
/// An array's elements (none when null or not an array).
[[nodiscard]] std::span<const msgpack::object> array_items(const msgpack::object* array);
/// A map's pairs (none when null or not a map).
[[nodiscard]] std::span<const msgpack::object_kv> map_items(const msgpack::object* map);
/// A str's text ("" otherwise).
[[nodiscard]] std::string text_of(const msgpack::object* value);
/// An integer (0 otherwise).
[[nodiscard]] int64_t integer_of(const msgpack::object* value);
/// A number, integer or float (0 otherwise).
[[nodiscard]] double number_of(const msgpack::object* value);

}  // namespace moe::net
