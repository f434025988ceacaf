// tools/cli_checks.hpp
// Validators shared by the verbs' flags.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>

#include "tools/token_ids.hpp"

namespace moe::tools {

/// For unsigned flags such as --seed: CLI11 would read "-1" as 2^64 - 1, and cap a value past
/// 2^64 - 1 to it in silence.
inline const CLI::Validator non_negative_integer(
  [](const std::string& text) {
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || text.front() == '-' || ec != std::errc{} || end != text.data() + text.size())
      return "expected a non-negative integer below 2^64, got " + text;
    return std::string();
  },
  "UINT");

/// For --tokens and --stop-token-ids: refused before any weights load.
inline const CLI::Validator token_id_list([](const std::string& text) { return token_ids_error(text); },
                                          "IDS");

}  // namespace moe::tools
