// kernels/tokenizer/utf8.cpp
// UTF-8 validation by the well-formed byte table (Unicode ch. 3, table 3-7).
#include "kernels/tokenizer/utf8.hpp"

#include <cstdint>

namespace moe::utf8 {
namespace {

/// Shape of the sequence a lead byte starts: its length and the allowed range of its second
/// byte (later bytes are always 80..BF). length 0 = not a lead byte.
struct lead_info {
  int length;
  uint8_t lo, hi;
};

lead_info lead(uint8_t b) {
  if (b < 0x80)
    return {1, 0, 0};
  if (b < 0xC2)
    return {0, 0, 0};
  if (b < 0xE0)
    return {2, 0x80, 0xBF};
  if (b == 0xE0)
    return {3, 0xA0, 0xBF};
  if (b == 0xED)
    return {3, 0x80, 0x9F};
  if (b < 0xF0)
    return {3, 0x80, 0xBF};
  if (b == 0xF0)
    return {4, 0x90, 0xBF};
  if (b < 0xF4)
    return {4, 0x80, 0xBF};
  if (b == 0xF4)
    return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

/// Bytes of `s` from `pos` that follow the well-formed table: equals info.length when the
/// character is complete; fewer when it is cut short by a bad byte or by the end of `s`.
int matched_bytes(std::string_view s, size_t pos, lead_info info) {
  if (info.length <= 1)
    return info.length;
  int k = 1;
  for (; k < info.length && pos + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const bool ok = k == 1 ? (b >= info.lo && b <= info.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok)
      break;
  }
  return k;
}

}  // namespace

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const lead_info info = lead(b0);
  if (matched_bytes(s, pos, info) != info.length || info.length == 0) {
    ++pos;
    return 0xFFFD;
  }
  if (info.length == 1) {
    ++pos;
    return b0;
  }
  char32_t cp = b0 & (0xFF >> (info.length + 1));
  for (int k = 1; k < info.length; ++k)
    cp = (cp << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  pos += info.length;
  return cp;
}

void append_lossy(std::string& out, std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // copy the longest well-formed run at once
    size_t run = pos;
    while (run < bytes.size()) {
      const lead_info info = lead(static_cast<uint8_t>(bytes[run]));
      if (info.length == 0 || matched_bytes(bytes, run, info) != info.length)
        break;
      run += info.length;
    }
    out.append(bytes.data() + pos, run - pos);
    pos = run;
    if (pos == bytes.size())
      break;
    const lead_info info = lead(static_cast<uint8_t>(bytes[pos]));
    const int bad = info.length == 0 ? 1 : matched_bytes(bytes, pos, info);
    out += "\xEF\xBF\xBD";  // U+FFFD for the maximal ill-formed subpart
    pos += static_cast<size_t>(bad);
  }
}

size_t unfinished_tail(std::string_view bytes) {
  // an unfinished character starts at most 3 bytes from the end, at a lead byte
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const lead_info info = lead(static_cast<uint8_t>(bytes[pos]));
    if (info.length == 0)
      continue;  // continuation (or invalid) byte: look further back
    const int k = matched_bytes(bytes, pos, info);
    return (info.length > static_cast<int>(back) && k == static_cast<int>(back)) ? back : 0;
  }
  return 0;
}

}  // namespace moe::utf8
