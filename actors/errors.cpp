// actors/errors.cpp
#include "actors/errors.hpp"

#include <caf/actor_system_config.hpp>

namespace moe {

std::string to_string(serve_errc x) {
  switch (x) {
    case serve_errc::none: return "none";
    case serve_errc::overloaded: return "overloaded";
    case serve_errc::invalid: return "invalid";
    case serve_errc::cancelled: return "cancelled";
    case serve_errc::unavailable: return "unavailable";
    case serve_errc::crash_loop: return "crash_loop";
    case serve_errc::refused: return "refused";
  }
  return "unknown";
}

std::string error_text(const caf::error& e) {
  const caf::message& ctx = e.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return {};
}

void add_serve_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(caf::atom("moe"), [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string text = "moe: " + to_string(static_cast<serve_errc>(code));
    if (!ctx.empty())
      text += " (" + to_string(ctx) + ")";
    return text;
  });
}

}  // namespace moe
