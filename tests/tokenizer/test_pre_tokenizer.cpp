// tests/tokenizer/test_pre_tokenizer.cpp
// The DeepSeek-V3 split regexes: the hand-written ASCII matchers against PCRE2 alone on random
// text (ASCII and mixed), and a few splits written out by hand from the regexes.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "kernels/tokenizer/ascii_matchers.hpp"
#include "kernels/tokenizer/pre_tokenizer.hpp"

namespace {

/// tokenizer.json's pre_tokenizer patterns, JSON-unescaped.
const std::vector<std::string> deepseek_patterns = {
  R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
  " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};

std::vector<std::string> split(const moe::pre_tokenizer& pre, const std::string& text) {
  std::vector<std::string_view> views;
  pre.split(text, views);
  return {views.begin(), views.end()};
}

std::string random_text(std::mt19937& gen, const std::vector<std::string>& pool, size_t length) {
  std::string text;
  for (size_t i = 0; i < length; ++i)
    text += pool[gen() % pool.size()];
  return text;
}

}  // namespace

TEST_CASE("the ASCII matchers are chosen for the DeepSeek-V3 patterns only") {
  auto has_matcher = [](const std::string& pattern) { return moe::ascii_matcher_for(pattern) != nullptr; };
  CHECK(has_matcher(deepseek_patterns[0]));
  CHECK_FALSE(has_matcher(deepseek_patterns[1]));
  CHECK(has_matcher(deepseek_patterns[2]));
  CHECK_FALSE(has_matcher(R"(\p{N}{1,4})"));
}

TEST_CASE("pre-tokenizer splits as the regexes say") {
  const moe::pre_tokenizer pre(deepseek_patterns, "test");
  using v = std::vector<std::string>;
  CHECK(split(pre, "Hello, world!") == v{"Hello", ",", " world", "!"});
  CHECK(split(pre, "1234567 x") == v{"123", "456", "7", " x"});
  CHECK(split(pre, "a  b\n\n  c  ") == v{"a", " ", " b", "\n\n", " ", " c", "  "});
  CHECK(split(pre, "it's (ok).\r\nno") == v{"it", "'s", " (", "ok", ").\r\n", "no"});
  CHECK(split(pre, "你好world世界") == v{"你好", "world", "世界"});
  CHECK(split(pre, "\x01\x02x\x03") == v{"\x01", "\x02x", "\x03"});
  CHECK(split(pre, "\n  \u3000\n x") == v{"\n  \u3000\n", " x"});  // newline after wide space
  CHECK(split(pre, "").empty());
  // U+180E is no space to Oniguruma (nor JavaScript), though PCRE2's \s includes it
  CHECK(split(pre, " \u180e") == v{" ", "\u180e"});
  CHECK(split(pre, "a \u180e\u180e b") == v{"a", " ", "\u180e\u180e", " b"});
  CHECK(split(pre, "\u0085\u2028 x") == v{"\u0085\u2028", " x"});  // NEL and Zl are spaces
}

TEST_CASE("\\s and \\S are Oniguruma's in and out of bracket classes, escapes kept") {
  const moe::pre_tokenizer pre({R"(\\s|[\s\d]+|\S)"}, "test");
  using v = std::vector<std::string>;
  CHECK(split(pre, "a1 \u180e2\\s") == v{"a", "1 ", "\u180e", "2", "\\s"});
}

TEST_CASE("ASCII matchers split exactly like PCRE2 on random text") {
  const moe::pre_tokenizer fast(deepseek_patterns, "test");
  const moe::pre_tokenizer pcre2_only(deepseek_patterns, "test", /*ascii_fast_paths=*/false);
  std::vector<std::string> ascii;
  for (int c = 0; c < 128; ++c)
    ascii.emplace_back(1, static_cast<char>(c));
  // runs of one class, so that ASCII and non-ASCII neighbours of each kind meet (whitespace,
  // where the regexes look furthest ahead, twice as often)
  const std::vector<std::string> space = {" "}, tab = {"\t", "\v", "\f"}, newline = {"\n", "\r", "\r\n"},
                                 wide_space = {"\u00a0", "\u3000", "\u2003", "\u2028"};
  const std::vector<std::vector<std::string>> classes = {space,
                                                         tab,
                                                         newline,
                                                         wide_space,
                                                         space,
                                                         tab,
                                                         newline,
                                                         wide_space,
                                                         {"a", "Z", "q"},
                                                         {"é", "ж", "Ω", "ß"},
                                                         {".", ",", "'", "(", "$", "_"},
                                                         {"—", "“", "。", "€", "«"},
                                                         {"1", "9", "0"},
                                                         {"١", "²", "½", "①"},
                                                         {"\u0301", "\u0308"},
                                                         {"你", "カ", "ー", "ひ"},
                                                         {"한", "😀", "\x01", "\x7f"},
                                                         {"\xff", "\xe4\xbd"}};

  std::mt19937 gen(7);
  auto check_same = [&](const std::string& text) {
    const auto expected = split(pcre2_only, text);
    REQUIRE_MESSAGE(split(fast, text) == expected, "text: " << nlohmann::json(text).dump());
  };
  for (int i = 0; i < 3000; ++i)
    check_same(random_text(gen, ascii, 1 + gen() % 40));
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    for (size_t num_runs = 1 + gen() % 8, r = 0; r < num_runs; ++r) {
      const auto& cls = classes[gen() % classes.size()];
      text += random_text(gen, cls, 1 + gen() % 4);
    }
    check_same(text);
  }
}

TEST_CASE("long runs of one class split in linear time") {
  const moe::pre_tokenizer pre(deepseek_patterns, "test");
  const size_t n = 1'000'000;
  auto count = [&](const std::string& text) {
    size_t num_pieces = 0, num_bytes = 0;
    pre.split(text, [&](std::string_view piece) {
      ++num_pieces;
      num_bytes += piece.size();
    });
    CHECK(num_bytes == text.size());
    return num_pieces;
  };
  CHECK(count(std::string(n, '7')) == (n + 2) / 3);
  CHECK(count(std::string(n, ' ') + "x") == 2);  // "   ...  " then " x"
  CHECK(count(std::string(n, 'a')) == 1);
  CHECK(count(std::string(n, '\n') + "é") == 2);
  CHECK(count(std::string(n / 2, ' ') + "é" + std::string(n / 2, '.')) == 3);
  std::string cjk;
  for (size_t i = 0; i < n / 3; ++i)
    cjk += "字";
  CHECK(count(cjk) == 1);
}
