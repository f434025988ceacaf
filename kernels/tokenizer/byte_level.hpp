// kernels/tokenizer/byte_level.hpp
// The GPT-2 byte-level alphabet: each byte 0..255 stands for one printable code point, so BPE
// vocabularies hold bytes as text ("Ġ" is the space byte). Converts in both directions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moe::byte_level {

/// The code point that stands for `byte` (printable bytes stand for themselves, others 256+n).
[[nodiscard]] char32_t char_of(unsigned char byte);

/// The byte-level text of raw `bytes` (each byte as its code point, UTF-8 encoded).
[[nodiscard]] std::string to_text(std::string_view bytes);

/// The raw bytes of byte-level `text`; nullopt when a character is outside the alphabet
/// (e.g. a special token's content), which HF's ByteLevel decoder then keeps as-is.
[[nodiscard]] std::optional<std::string> to_bytes(std::string_view text);

}  // namespace moe::byte_level
