// tests/tokenizer/test_chat_template.cpp
// apply_chat_template against the DeepSeek-V3 Jinja template as rendered by the JavaScript
// package's own Jinja engine (vectors.json "chat"), plus hand-checked strings.
#include <doctest/doctest.h>

#include "config/model_config.hpp"
#include "tests/tokenizer/real_tokenizer.hpp"

TEST_CASE("chat template matches the Jinja render of every vector") {
  const auto& cases = moe::test::vectors().at("chat");
  REQUIRE(cases.size() >= 10);
  for (const auto& c : cases) {
    std::vector<moe::chat_message> messages;
    for (const auto& m : c.at("messages"))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    const bool prompt = c.at("add_generation_prompt").get<bool>();
    CHECK_MESSAGE(moe::apply_chat_template(messages, prompt) == c.at("text").get<std::string>(),
                  c.at("messages").dump());
  }
}

TEST_CASE("chat template: system prompts follow BOS, turns alternate") {
  const std::vector<moe::chat_message> messages = {
    {"system", "S1"}, {"user", "hi"}, {"system", "S2"}, {"assistant", "yo"}, {"user", "q"}};
  CHECK(moe::apply_chat_template(messages) ==
        "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>hi<｜Assistant｜>yo<｜end▁of▁sentence｜>"
        "<｜User｜>q<｜Assistant｜>");
  CHECK(moe::apply_chat_template(messages, false) ==
        "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>hi<｜Assistant｜>yo<｜end▁of▁sentence｜><｜User｜>q");
}

TEST_CASE("chat template: an unknown role is an input error") {
  CHECK_THROWS_AS((void)moe::apply_chat_template({{"narrator", "x"}}), moe::input_error);
}

TEST_CASE("chat template encodes to the special-token ids") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const auto ids = tok->encode(moe::apply_chat_template({{"user", "Hi"}}));
  REQUIRE(ids.size() == 4);
  CHECK(ids[0] == tok->bos_id());
  CHECK(ids[1] == *tok->token_id("<｜User｜>"));
  CHECK(ids[3] == *tok->token_id("<｜Assistant｜>"));
  CHECK_FALSE(tok->is_special(ids[1]));  // User/Assistant are added but not special
  CHECK(tok->is_special(ids[0]));
}
