// config/toml_fields.cpp
#include "config/toml_fields.hpp"

#include <sstream>
#include <type_traits>

#include "config/model_config.hpp"  // input_error

namespace moe {

toml::table parse_toml(std::string_view toml_text, std::string_view origin) {
  try {
    return toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << origin << ':' << e.source().begin.line << ':' << e.source().begin.column << ": "
        << e.description();
    throw input_error(msg.str());
  }
}

void key_error(std::string_view origin, const toml::node& node, std::string_view name,
               std::string_view what) {
  std::ostringstream msg;
  msg << origin << ':' << node.source().begin.line << ':' << node.source().begin.column << ": key \"" << name
      << "\": " << what;
  throw input_error(msg.str());
}

void type_error(std::string_view origin, const toml::node& node, std::string_view name,
                std::string_view expected) {
  std::ostringstream what;
  what << "expected " << expected << ", got " << node.type() << ' ';
  node.visit([&](const auto& value) { what << value; });
  key_error(origin, node, name, what.str());
}

void assign(field_ref field, const toml::node& node, std::string_view origin, std::string_view name) {
  std::visit(
    [&](auto* out) {
      using value_type = std::remove_pointer_t<decltype(out)>;
      if constexpr (std::is_same_v<value_type, int64_t>) {
        if (!node.is_integer())
          type_error(origin, node, name, "an integer");
        *out = node.as_integer()->get();
      } else if constexpr (std::is_same_v<value_type, double>) {
        if (!node.is_number())
          type_error(origin, node, name, "a number");
        *out = node.value<double>().value();
      } else if constexpr (std::is_same_v<value_type, bool>) {
        if (!node.is_boolean())
          type_error(origin, node, name, "true or false");
        *out = node.as_boolean()->get();
      } else {
        if (!node.is_string())
          type_error(origin, node, name, "a string");
        *out = node.as_string()->get();
      }
    },
    field);
}

}  // namespace moe
