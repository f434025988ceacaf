// tests/tokenizer/test_mini_tokenizer.cpp
// A small tokenizer.json written by the test: merge ranks, both merge forms, added-token flags
// and the errors for missing or malformed files. Needs no installed files.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/model_config.hpp"
#include "kernels/tokenizer/byte_level.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace {

using nlohmann::json;

/// A byte-level BPE over the 256 single bytes (ids 0..255) plus `merges` (ids from 256 on),
/// split by GPT-2's regex, with `added` tokens.
json mini_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                         bool merges_as_arrays, json added = json::array()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    vocab[moe::byte_level::to_text(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    const std::string merged = left + right;
    if (!vocab.contains(merged))
      vocab[merged] = static_cast<int>(vocab.size());
    merge_list.push_back(merges_as_arrays ? json::array({left, right}) : json(left + " " + right));
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json added_token(int id, const std::string& content, bool lstrip = false, bool rstrip = false,
                 bool single_word = false) {
  return {{"id", id},         {"content", content}, {"single_word", single_word},
          {"lstrip", lstrip}, {"rstrip", rstrip},   {"normalized", false},
          {"special", true}};
}

/// A fresh directory holding the given files.
std::filesystem::path write_dir(const std::string& name,
                                const std::vector<std::pair<std::string, std::string>>& files) {
  const auto dir = std::filesystem::temp_directory_path() / ("moe_test_tokenizer_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& [file, text] : files)
    std::ofstream(dir / file) << text;
  return dir;
}

std::shared_ptr<const moe::tokenizer> load_mini(const std::string& name, const json& tokenizer) {
  return moe::tokenizer::load(write_dir(name, {{"tokenizer.json", tokenizer.dump()}}));
}

int32_t id_of(const moe::tokenizer& tok, const std::string& bytes) {
  return *tok.token_id(moe::byte_level::to_text(bytes));
}

}  // namespace

TEST_CASE("mini BPE: the lowest-ranked pair merges first") {
  for (const bool as_arrays : {false, true}) {
    CAPTURE(as_arrays);
    const auto ab_first = load_mini("ab", mini_tokenizer_json({{"a", "b"}, {"b", "c"}}, as_arrays));
    CHECK(ab_first->encode("abc") == std::vector<int32_t>{id_of(*ab_first, "ab"), 'c'});
    const auto bc_first = load_mini("bc", mini_tokenizer_json({{"b", "c"}, {"a", "b"}}, as_arrays));
    CHECK(bc_first->encode("abc") == std::vector<int32_t>{'a', id_of(*bc_first, "bc")});
  }
  const auto tok = load_mini(
    "hello",
    mini_tokenizer_json({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}}, false));
  CHECK(tok->encode("hello") == std::vector<int32_t>{id_of(*tok, "hello")});
  CHECK(tok->encode(" hello hello") == std::vector<int32_t>{id_of(*tok, " hello"), id_of(*tok, " hello")});
  CHECK(tok->encode("hellohello") == std::vector<int32_t>{id_of(*tok, "hello"), id_of(*tok, "hello")});
  CHECK(tok->decode(tok->encode("hello, world!")) == "hello, world!");
  CHECK(tok->vocab_size() == 261);
  CHECK(tok->bos_id() == -1);  // no config and no DeepSeek BOS token
  CHECK_THROWS_AS((void)tok->encode("x", /*add_bos=*/true), moe::input_error);
}

TEST_CASE("mini BPE: a long run of one byte merges like a short one") {
  const auto tok = load_mini("aa", mini_tokenizer_json({{"a", "a"}, {"aa", "aa"}}, false));
  const int32_t aa = id_of(*tok, "aa"), aaaa = id_of(*tok, "aaaa");
  CHECK(tok->encode("aaaaa") == std::vector<int32_t>{aaaa, 'a'});
  CHECK(tok->encode(std::string(4000, 'a')) == std::vector<int32_t>(1000, aaaa));
  CHECK(tok->encode(std::string(6, 'a')) == std::vector<int32_t>{aaaa, aa});
}

TEST_CASE("mini added tokens: leftmost-longest, lstrip, rstrip, single_word") {
  const json added =
    json::array({added_token(300, "<s>"), added_token(301, "<s>>"), added_token(302, "[L]", /*lstrip=*/true),
                 added_token(303, "[R]", false, /*rstrip=*/true),
                 added_token(304, "tok", false, false, /*single_word=*/true)});
  const auto tok = load_mini("added", mini_tokenizer_json({}, false, added));
  CHECK(tok->encode("a<s>>b") == std::vector<int32_t>{'a', 301, 'b'});
  CHECK(tok->encode("<s<s>") == std::vector<int32_t>{'<', 's', 300});
  CHECK(tok->encode("x  [L]y") == std::vector<int32_t>{'x', 302, 'y'});
  CHECK(tok->encode("x[R] \n y") == std::vector<int32_t>{'x', 303, 'y'});
  CHECK(tok->encode("a tok b") == std::vector<int32_t>{'a', id_of(*tok, " "), 304, id_of(*tok, " "), 'b'});
  CHECK(tok->encode("atok") == std::vector<int32_t>{'a', 't', 'o', 'k'});
  CHECK(tok->is_special(300));
  CHECK(tok->decode({'a', 300, 'b'}, /*skip_special=*/true) == "ab");
}

TEST_CASE("load errors name the file") {
  const auto empty = write_dir("empty", {});
  CHECK_THROWS_WITH_AS((void)moe::tokenizer::load(empty), doctest::Contains("tokenizer.json"),
                       moe::input_error);
  const auto bad_json = write_dir("bad_json", {{"tokenizer.json", "{not json"}});
  CHECK_THROWS_WITH_AS((void)moe::tokenizer::load(bad_json), doctest::Contains("malformed JSON"),
                       moe::input_error);
  json bad_merge = mini_tokenizer_json({}, false);
  bad_merge["model"]["merges"] = json::array({"x nosuchtoken"});
  CHECK_THROWS_WITH_AS((void)load_mini("bad_merge", bad_merge), doctest::Contains("not in the vocab"),
                       moe::input_error);
  json bad_regex = mini_tokenizer_json({}, false);
  bad_regex["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers",
                                 json::array({{{"type", "Split"},
                                               {"pattern", {{"Regex", "(unclosed"}}},
                                               {"behavior", "Isolated"},
                                               {"invert", false}},
                                              {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  CHECK_THROWS_WITH_AS((void)load_mini("bad_regex", bad_regex), doctest::Contains("does not compile"),
                       moe::input_error);
  json normalizer = mini_tokenizer_json({}, false);
  normalizer["normalizer"] = {{"type", "NFC"}};
  CHECK_THROWS_AS((void)load_mini("normalizer", normalizer), moe::input_error);
  const auto bad_config = write_dir("bad_config", {{"tokenizer.json", mini_tokenizer_json({}, false).dump()},
                                                   {"tokenizer_config.json", R"({"bos_token": "<nope>"})"}});
  CHECK_THROWS_WITH_AS((void)moe::tokenizer::load(bad_config), doctest::Contains("tokenizer_config.json"),
                       moe::input_error);
}
