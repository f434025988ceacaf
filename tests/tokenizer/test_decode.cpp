// tests/tokenizer/test_decode.cpp
// decode and the streaming incremental_decoder on the real vocab: special tokens, invalid UTF-8,
// and characters split across tokens (emoji, CJK).
#include <doctest/doctest.h>

#include "kernels/tokenizer/byte_level.hpp"
#include "tests/tokenizer/real_tokenizer.hpp"

namespace {

const std::string replacement = "\xEF\xBF\xBD";

/// Every push of the streaming decoder, then finish().
std::vector<std::string> stream(const std::shared_ptr<const moe::tokenizer>& tok,
                                const std::vector<int32_t>& ids, bool skip_special = false) {
  moe::incremental_decoder decoder(tok, skip_special);
  std::vector<std::string> parts;
  for (const int32_t id : ids)
    parts.push_back(decoder.push(id));
  parts.push_back(decoder.finish());
  return parts;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const auto& p : parts)
    text += p;
  return text;
}

int32_t byte_token(const moe::tokenizer& tok, unsigned char byte) {
  return *tok.token_id(moe::byte_level::to_text(std::string(1, static_cast<char>(byte))));
}

}  // namespace

TEST_CASE("decode keeps special tokens unless skip_special") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const auto ids = tok->encode("<｜User｜>Hi<｜end▁of▁sentence｜>", /*add_bos=*/true);
  CHECK(tok->decode(ids) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜end▁of▁sentence｜>");
  CHECK(tok->decode(ids, /*skip_special=*/true) == "<｜User｜>Hi");
  CHECK(tok->token_bytes(tok->eos_id()) == "<｜end▁of▁sentence｜>");
  CHECK(tok->token_bytes(*tok->token_id("Ġthe")) == " the");
  CHECK(tok->decode({-1, 999999, tok->vocab_size()}).empty());  // unknown ids are skipped
  CHECK_FALSE(tok->token_id("no such token").has_value());
}

TEST_CASE("decode turns invalid UTF-8 into U+FFFD") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const int32_t e4 = byte_token(*tok, 0xE4), bd = byte_token(*tok, 0xBD);
  const int32_t a0 = byte_token(*tok, 0xA0), ff = byte_token(*tok, 0xFF);
  const int32_t x = *tok->token_id("x");
  CHECK(tok->decode({e4, bd, a0}) == "你");
  CHECK(tok->decode({e4, bd}) == replacement);           // cut short at the end
  CHECK(tok->decode({e4, bd, x}) == replacement + "x");  // cut short by a bad byte
  CHECK(tok->decode({ff, x}) == replacement + "x");
  CHECK(joined(stream(tok, {e4, bd})) == replacement);
  CHECK(joined(stream(tok, {ff, e4, x})) == replacement + replacement + "x");
}

TEST_CASE("incremental decoder never emits half a character") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const int32_t e4 = byte_token(*tok, 0xE4), bd = byte_token(*tok, 0xBD), a0 = byte_token(*tok, 0xA0);
  CHECK(stream(tok, {e4, bd, a0}) == std::vector<std::string>{"", "", "你", ""});

  int num_split_chars = 0;  // texts where some token ends mid-character
  for (const std::string text :
       {"👨‍👩‍👧‍👦 family", "🇺🇸🇨🇳🇯🇵🇩🇪", "😀😃😄😁😆😅😂🤣",
        "深度求索是一家人工智能公司", "カタカナとひらがな", "안녕하세요, 세계!", "I love 🍕 and 🍣!"}) {
    const auto ids = tok->encode(text);
    const auto parts = stream(tok, ids);
    CHECK(joined(parts) == text);
    for (const auto& part : parts)
      CHECK(part.find(replacement) == std::string::npos);
    for (size_t i = 0; i < ids.size(); ++i)
      num_split_chars += parts[i].empty() && !tok->token_bytes(ids[i]).empty();
  }
  CHECK(num_split_chars > 0);  // the cases above do exercise the hold-back
}

TEST_CASE("incremental decoding equals decode on every vector") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  for (const auto& c : moe::test::vectors().at("encode")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    CHECK(joined(stream(tok, ids)) == tok->decode(ids));
    CHECK(joined(stream(tok, ids, true)) == tok->decode(ids, true));
  }
}
