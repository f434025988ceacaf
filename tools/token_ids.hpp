// tools/token_ids.hpp
// Token ids given on a command line or stdin: "1,2,3", "1 2 3" or a JSON array "[1, 2, 3]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::tools {

/// The ids of `text`; throws input_error naming `what` (a flag, or "ids") on anything else:
/// a sign, a stray or unbalanced bracket, a non-digit, an id past int32, or no ids unless
/// `allow_empty`.
[[nodiscard]] std::vector<int32_t> parse_ids(const std::string& text, const std::string& what,
                                             bool allow_empty = false);

/// What parse_ids would refuse `text` for (without the name), or "" when it is fine: for
/// checking a flag before any weights load.
[[nodiscard]] std::string token_ids_error(const std::string& text, bool allow_empty = false);

}  // namespace moe::tools
