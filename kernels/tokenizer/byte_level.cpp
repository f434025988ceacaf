// kernels/tokenizer/byte_level.cpp
// bytes_to_unicode() from GPT-2's encoder.py, as tables built once.
#include "kernels/tokenizer/byte_level.hpp"

#include <array>

#include "kernels/tokenizer/utf8.hpp"

namespace moe::byte_level {
namespace {

struct tables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 324> byte_of_char{};  // code points 0..323 -> byte, -1 if none

  tables() {
    byte_of_char.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of_byte[b] = printable ? static_cast<char32_t>(b) : next_extra++;
      byte_of_char[char_of_byte[b]] = b;
    }
  }
};

const tables& the_tables() {
  static const tables t;
  return t;
}

}  // namespace

char32_t char_of(unsigned char byte) { return the_tables().char_of_byte[byte]; }

std::string to_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes)
    utf8::append(out, char_of(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> to_bytes(std::string_view text) {
  const auto& t = the_tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = utf8::next(text, pos);
    if (cp >= t.byte_of_char.size() || t.byte_of_char[cp] < 0)
      return std::nullopt;
    out += static_cast<char>(t.byte_of_char[cp]);
  }
  return out;
}

}  // namespace moe::byte_level
