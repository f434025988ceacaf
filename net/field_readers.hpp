// net/field_readers.hpp
// Typed reads of msgpack values for params validation. Each returns an error naming `field`
// and what was expected ("top_k: expected an integer in [-1, 2147483647], got str"), or nullopt
// after storing the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <msgpack/object_fwd.hpp>

#include "net/rpc_errors.hpp"

namespace moe::net {

using maybe_error = std::optional<rpc_error>;

/// At most 64 bytes of client text for an error message, ill-formed UTF-8 replaced by U+FFFD.
[[nodiscard]] std::string printable(std::string_view text);

/// "nil", "bool", "integer", "float", "str", "bin", "array", "map" or "ext".
[[nodiscard]] std::string_view type_name(const msgpack::object& value) noexcept;

/// 422: "<field>: expected <expected>, got <what value is>".
[[nodiscard]] rpc_error field_error(std::string_view field, std::string_view expected,
                                    const msgpack::object& value);
/// 413: "<field>: <what>, over the limit of <limit>".
[[nodiscard]] rpc_error field_too_large(std::string_view field, std::string_view what, size_t limit);

[[nodiscard]] maybe_error read_bool(const msgpack::object& value, std::string_view field, bool& out);
/// Any integer or float; msgpack-c packs integral doubles as integers, so both are numbers.
[[nodiscard]] maybe_error read_float(const msgpack::object& value, std::string_view field, float& out);
/// An integer in [lo, hi].
[[nodiscard]] maybe_error read_int(const msgpack::object& value, std::string_view field, int64_t lo,
                                   int64_t hi, int64_t& out);
/// A str of at most max_bytes bytes of well-formed UTF-8.
[[nodiscard]] maybe_error read_string(const msgpack::object& value, std::string_view field, size_t max_bytes,
                                      std::string& out);

}  // namespace moe::net
