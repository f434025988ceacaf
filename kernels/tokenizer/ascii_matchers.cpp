// kernels/tokenizer/ascii_matchers.cpp
// The three DeepSeek-V3 split regexes, restricted to ASCII. On ASCII, \p{L} = [A-Za-z],
// \p{P}|\p{S} = the 32 printable non-alphanumerics, \p{N} = [0-9], \p{M} is empty, \s = [\t\n\v\f\r ].
#include "kernels/tokenizer/ascii_matchers.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace moe {
namespace {

enum char_class : uint8_t {
  letter = 1,
  punct = 2,    // \p{P} or \p{S}
  space = 4,    // \s
  newline = 8,  // \r or \n
  digit = 16,
};

constexpr std::array<uint8_t, 128> make_classes() {
  std::array<uint8_t, 128> c{};
  for (int ch = 0; ch < 128; ++ch) {
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z'))
      c[ch] = letter;
    else if (ch >= '0' && ch <= '9')
      c[ch] = digit;
    else if (ch > ' ' && ch < 127)
      c[ch] = punct;
    else if (ch == ' ' || (ch >= '\t' && ch <= '\r'))
      c[ch] = space | (ch == '\r' || ch == '\n' ? newline : 0);
  }
  return c;
}
constexpr std::array<uint8_t, 128> classes = make_classes();

/// Reads characters of one piece, remembering the highest index looked at.
struct cursor {
  std::string_view s;
  size_t last_read = 0;

  bool is(size_t i, uint8_t cls) {
    last_read = std::max(last_read, i);
    return i < s.size() && (classes[static_cast<unsigned char>(s[i]) & 0x7F] & cls);
  }
  size_t run_end(size_t i, uint8_t cls) {
    while (is(i, cls))
      ++i;
    return i;
  }
};

/// \p{N}{1,3} (looks at no more than three characters: a long run of digits stays linear)
size_t digits_1_3(std::string_view s, size_t pos, size_t& last_read) {
  cursor c{s, pos};
  size_t end = pos;
  while (end < pos + 3 && c.is(end, digit))
    ++end;
  last_read = c.last_read;
  return end;
}

/// [!-/:-@\[-`{-~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]*
/// | \s*[\r\n]+ | \s+(?!\S) | \s+
size_t words(cursor& c, size_t pos) {
  if (c.is(pos, punct)) {
    if (c.is(pos + 1, letter))
      return c.run_end(pos + 1, letter);               // punctuation + letters
    return c.run_end(c.run_end(pos, punct), newline);  // punctuation run + newlines
  }
  if (c.is(pos, letter))
    return c.run_end(pos, letter);
  if (!c.is(pos, newline) && c.is(pos + 1, letter))
    return c.run_end(pos + 1, letter);  // one prefix character + letters
  if (c.s[pos] == ' ' && c.is(pos + 1, punct))
    return c.run_end(c.run_end(pos + 1, punct), newline);  // " " + punctuation + newlines
  if (!c.is(pos, space))
    return pos;  // digit or control: no match
  const size_t end = c.run_end(pos, space);
  for (size_t i = end; i > pos; --i)  // \s*[\r\n]+: to the last newline
    if (c.is(i - 1, newline))
      return i;
  if (end == c.s.size() || end - pos == 1)  // \s+(?!\S) at the end, or \s+
    return end;
  return end - 1;  // \s+(?!\S): leave one space
}

size_t deepseek_words(std::string_view s, size_t pos, size_t& last_read) {
  cursor c{s, pos};
  const size_t end = words(c, pos);
  last_read = c.last_read;
  return end;
}

}  // namespace

ascii_match_fn ascii_matcher_for(const std::string& pattern) {
  if (pattern == R"(\p{N}{1,3})")
    return digits_1_3;
  if (pattern ==
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
    return deepseek_words;
  return nullptr;
}

}  // namespace moe
