// config/toml_fields.hpp
// What the TOML config files share: parsing with errors at "<origin>:<line>:<column>", and
// storing a value into a typed field with an error naming the key when the type does not fit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <toml++/toml.h>

namespace moe {

/// A config field a TOML key sets.
using field_ref = std::variant<int64_t*, double*, bool*, std::string*>;

/// Parses TOML text; a syntax error is an input_error "<origin>:<line>:<column>: <what>".
[[nodiscard]] toml::table parse_toml(std::string_view toml_text, std::string_view origin);

/// Throws input_error "<origin>:<line>:<column>: key "<name>": <what>".
[[noreturn]] void key_error(std::string_view origin, const toml::node& node, std::string_view name,
                            std::string_view what);

/// key_error saying what was expected and what the node holds.
[[noreturn]] void type_error(std::string_view origin, const toml::node& node, std::string_view name,
                             std::string_view expected);

/// Stores `node` into `field` when the TOML type fits (an integer also fits a double).
void assign(field_ref field, const toml::node& node, std::string_view origin, std::string_view name);

}  // namespace moe
