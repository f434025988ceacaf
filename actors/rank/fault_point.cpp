// actors/rank/fault_point.cpp
#include "actors/rank/fault_point.hpp"

#include <array>

namespace moe {

namespace {
constexpr std::array<std::string_view, 6> names{"none",    "dispatch",     "combine",
                                                "handoff", "first_decode", "hang"};
}  // namespace

std::string_view to_string(fault_point p) noexcept { return names[static_cast<size_t>(p)]; }

std::optional<fault_point> parse_fault_point(std::string_view name) noexcept {
  for (size_t i = 1; i < names.size(); ++i)
    if (names[i] == name)
      return static_cast<fault_point>(i);
  return std::nullopt;
}

}  // namespace moe
