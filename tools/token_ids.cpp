// tools/token_ids.cpp
#include "tools/token_ids.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "config/model_config.hpp"

namespace moe::tools {

namespace {

// The ids of `text` into `ids`, or what is wrong with it.
std::string read_ids(const std::string& text, bool allow_empty, std::vector<int32_t>& ids) {
  const auto fail = [&](const std::string& why) {
    return "expected non-negative integer token ids like 1,2,3 or [1, 2, 3]; " + why + " in \"" +
           text.substr(0, 60) + (text.size() > 60 ? "...\"" : "\"");
  };
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end && space(*p))
    ++p;
  while (end > p && space(end[-1]))
    --end;
  if (p < end && *p == '[') {  // a JSON array: brackets around the whole list only
    if (end[-1] != ']' || end - p < 2)
      return fail("the '[' is never closed");
    ++p;
    --end;
  }
  bool want_id = true;  // after the start or a comma
  for (;;) {
    while (p < end && space(*p))
      ++p;
    if (p == end)
      break;
    if (*p == ',') {
      if (want_id)
        return fail("an empty item");
      want_id = true;
      ++p;
      continue;
    }
    int32_t id = 0;
    const auto [next, ec] = std::isdigit(static_cast<unsigned char>(*p)) != 0
                              ? std::from_chars(p, end, id)
                              : std::from_chars_result{p, std::errc::invalid_argument};  // no signs
    if (ec == std::errc::result_out_of_range)
      return fail("an id past 2^31-1");
    if (ec != std::errc{})
      return fail(std::string("cannot read '") +
                  std::string(p, std::min<size_t>(12, static_cast<size_t>(end - p))) + "'");
    ids.push_back(id);
    want_id = false;
    p = next;
  }
  if (want_id && !ids.empty())
    return fail("a trailing comma");
  if (ids.empty() && !allow_empty)
    return fail("no ids given");
  return {};
}

}  // namespace

std::string token_ids_error(const std::string& text, bool allow_empty) {
  std::vector<int32_t> ids;
  return read_ids(text, allow_empty, ids);
}

std::vector<int32_t> parse_ids(const std::string& text, const std::string& what, bool allow_empty) {
  std::vector<int32_t> ids;
  if (const std::string err = read_ids(text, allow_empty, ids); !err.empty())
    throw input_error(what + ": " + err);
  return ids;
}

}  // namespace moe::tools
