// tests/tools/test_token_ids.cpp
// Token ids from a command line: the accepted forms, and each malformed one refused by name.
#include <doctest/doctest.h>

#include "config/model_config.hpp"
#include "tools/token_ids.hpp"

using moe::tools::parse_ids;

namespace {

std::string error_of(const std::string& text, bool allow_empty = false) {
  try {
    (void)parse_ids(text, "--tokens", allow_empty);
  } catch (const moe::input_error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("token ids: commas, spaces or a JSON array") {
  const std::vector<int32_t> want = {0, 17, 2147483647};
  CHECK(parse_ids("0,17,2147483647", "x") == want);
  CHECK(parse_ids(" 0 17\t2147483647\n", "x") == want);
  CHECK(parse_ids("[0, 17, 2147483647]", "x") == want);
  CHECK(parse_ids("  [ 0 ,17 , 2147483647 ]  ", "x") == want);
  CHECK(parse_ids("[]", "x", /*allow_empty=*/true).empty());
  CHECK(parse_ids("", "x", /*allow_empty=*/true).empty());
}

TEST_CASE("token ids: malformed lists are refused naming the flag and the fault") {
  const std::vector<std::pair<std::string, std::string>> cases = {
    {"[1,2", "the '[' is never closed"},
    {"1,2]", "cannot read ']'"},
    {"[1,[2]]", "cannot read '[2]'"},
    {"1,,2", "an empty item"},
    {",1", "an empty item"},
    {"1,2,", "a trailing comma"},
    {"-1", "cannot read '-1'"},
    {"+1", "cannot read '+1'"},
    {"1.5", "cannot read '.5'"},
    {"12abc", "cannot read 'abc'"},
    {"2147483648", "an id past 2^31-1"},
    {"", "no ids given"},
    {"[ ]", "no ids given"},
  };
  for (const auto& [text, why] : cases) {
    CAPTURE(text);
    const std::string msg = error_of(text);
    CHECK_MESSAGE(msg.find("--tokens: expected non-negative integer token ids") == 0, msg);
    CHECK_MESSAGE(msg.find(why) != std::string::npos, msg);
    CHECK(moe::tools::token_ids_error(text).find(why) != std::string::npos);  // the flags' check
  }
  CHECK(moe::tools::token_ids_error("[1, 2]").empty());
}
