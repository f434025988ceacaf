// kernels/tokenizer/ascii_matchers.hpp
// Hand-written equivalents, on ASCII-only text, of the DeepSeek-V3 pre-tokenizer regexes: the
// regex engine's per-match cost dominates encoding, and most text is ASCII. Each one is chosen
// by the exact pattern text; any other pattern (or a piece with a non-ASCII byte) uses PCRE2.
// test_pre_tokenizer checks them against PCRE2 on random ASCII.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moe {

/// End of the match starting exactly at `pos` in ASCII `piece`, or `pos` when none starts there
/// (the leftmost-first alternative, as a backtracking engine picks it). `last_read` is set to the
/// highest index the decision looked at (piece.size() when it ran into the end): the result holds
/// for any longer text that agrees with `piece` up to that index.
using ascii_match_fn = size_t (*)(std::string_view piece, size_t pos, size_t& last_read);

/// The ASCII matcher for `pattern`, or nullptr when there is none.
[[nodiscard]] ascii_match_fn ascii_matcher_for(const std::string& pattern);

}  // namespace moe
