// net/http/json_values.hpp
// JSON (nlohmann) and MessagePack values into each other, so that the HTTP front hands the wire's
// methods the very params the wire would get (one validator) and renders their results as JSON.
// JSON text is parsed with a nesting limit, before anything deep is built.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "net/rpc_errors.hpp"

namespace moe::net {

/// The JSON text `body`, or a 400 saying where it is not JSON (or nested deeper than max_depth).
[[nodiscard]] std::variant<nlohmann::json, rpc_error> parse_json_body(std::string_view body,
                                                                      size_t max_depth = 16);

/// Packs `value`: integers as integers (an integral float too, as msgpack-c packs doubles that
/// are whole numbers), other numbers as float64, strings, arrays and objects as they are.
void pack_json(msgpack::packer<msgpack::sbuffer>& pk, const nlohmann::json& value);

/// `value` as JSON: str and bin as strings, ext as null, map keys that are not strings as their
/// JSON text.
[[nodiscard]] nlohmann::json to_json(const msgpack::object& value);

/// JSON text whose strings are valid UTF-8: ill-formed bytes (a token's partial character)
/// become U+FFFD.
[[nodiscard]] std::string dump_json(const nlohmann::json& value);

/// The wire's error map {code, type, message, retryable, retry_after_ms?} back as an rpc_error
/// (a 500 when it is not one).
[[nodiscard]] rpc_error error_of(const msgpack::object& error_map);

}  // namespace moe::net
