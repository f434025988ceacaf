// kernels/tokenizer/utf8.hpp
// UTF-8 helpers shared by the tokenizer: appending a code point, decoding one, replacing invalid
// sequences with U+FFFD (maximal-subpart rule, as Rust's from_utf8_lossy and the WHATWG decoder),
// and finding an unfinished character at the end of a byte string.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moe::utf8 {

/// Appends the UTF-8 encoding of `cp` (assumed a valid scalar value).
void append(std::string& out, char32_t cp);

/// Decodes the well-formed character at `s[pos]`, advancing pos; returns U+FFFD and advances
/// one byte on an ill-formed sequence.
[[nodiscard]] char32_t next(std::string_view s, size_t& pos);

/// Appends `bytes` to `out`, replacing each maximal ill-formed subpart with U+FFFD.
void append_lossy(std::string& out, std::string_view bytes);

/// Number of trailing bytes of `bytes` that are a well-formed but unfinished character (0-3):
/// the bytes a streaming decoder must hold back until the next token arrives.
[[nodiscard]] size_t unfinished_tail(std::string_view bytes);

}  // namespace moe::utf8
