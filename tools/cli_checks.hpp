// tools/cli_checks.hpp
// Validators shared by the verbs' flags.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tools/token_ids.hpp"

namespace moe::tools {

/// For unsigned flags such as --seed: CLI11 would read "-1" as 2^64 - 1.
inline const CLI::Validator non_negative_integer(
    [](const std::string& text) {
      return text.empty() || text.front() == '-' ? "expected a non-negative integer, got " + text : std::string();
    },
    "UINT");

/// For --tokens and --stop-token-ids: refused before any weights load.
inline const CLI::Validator token_id_list([](const std::string& text) { return token_ids_error(text); },
                                          "IDS");

}  // namespace moe::tools
