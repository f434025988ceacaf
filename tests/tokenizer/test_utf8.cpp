// tests/tokenizer/test_utf8.cpp
// The UTF-8 helpers and the GPT-2 byte alphabet, without any tokenizer files.
#include <doctest/doctest.h>

#include "kernels/tokenizer/byte_level.hpp"
#include "kernels/tokenizer/utf8.hpp"

namespace {

std::string lossy(std::string_view bytes) {
  std::string out;
  moe::utf8::append_lossy(out, bytes);
  return out;
}

const std::string fffd = "\xEF\xBF\xBD";

}  // namespace

TEST_CASE("append_lossy replaces each maximal ill-formed subpart with one U+FFFD") {
  CHECK(lossy("plain ascii") == "plain ascii");
  CHECK(lossy("你好 🍕") == "你好 🍕");
  CHECK(lossy("\xF0\x9F\x8D") == fffd);  // truncated 4-byte character
  CHECK(lossy("a\xE4\xBD"
              "b") == "a" + fffd + "b");
  CHECK(lossy("\xC0\x80") == fffd + fffd);                        // overlong: C0 never starts one
  CHECK(lossy("\xED\xA0\x80") == fffd + fffd + fffd);             // surrogate: ED A0 is ill-formed
  CHECK(lossy("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // above U+10FFFF
  CHECK(lossy("\x80\xBF") == fffd + fffd);
  CHECK(lossy(std::string("\0x", 2)) == std::string("\0x", 2));
}

TEST_CASE("unfinished_tail finds a character cut short at the end") {
  CHECK(moe::utf8::unfinished_tail("abc") == 0);
  CHECK(moe::utf8::unfinished_tail("a\xE4") == 1);
  CHECK(moe::utf8::unfinished_tail("a\xE4\xBD") == 2);
  CHECK(moe::utf8::unfinished_tail("\xE4\xBD\xA0") == 0);  // complete
  CHECK(moe::utf8::unfinished_tail("\xF0\x9F\x8D") == 3);
  CHECK(moe::utf8::unfinished_tail("\xE4\xFF") == 0);  // can never finish
  CHECK(moe::utf8::unfinished_tail("\xED\xA0") == 0);  // would be a surrogate
  CHECK(moe::utf8::unfinished_tail("\xBD") == 0);
  CHECK(moe::utf8::unfinished_tail("") == 0);
}

TEST_CASE("byte-level alphabet: printable bytes stand for themselves, the rest from U+0100") {
  CHECK(moe::byte_level::char_of('a') == U'a');
  CHECK(moe::byte_level::char_of(' ') == U'\u0120');   // "Ġ"
  CHECK(moe::byte_level::char_of('\n') == U'\u010A');  // "Ċ"
  CHECK(moe::byte_level::to_text(" the") == "Ġthe");
  CHECK(moe::byte_level::to_bytes("Ġthe") == " the");
  CHECK_FALSE(moe::byte_level::to_bytes("<｜User｜>").has_value());
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    CHECK(moe::byte_level::to_bytes(moe::byte_level::to_text(byte)) == byte);
  }
}
