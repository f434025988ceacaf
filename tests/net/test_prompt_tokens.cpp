// tests/net/test_prompt_tokens.cpp
// A generate's prompt as model token ids, with the real DeepSeek-V3 tokenizer.
#include <doctest/doctest.h>

#include <filesystem>

#include "net/prompt_tokens.hpp"

using namespace moe;
using namespace moe::net;

namespace {

std::shared_ptr<const tokenizer> real_tokenizer() {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json"))
    return nullptr;
  return tokenizer::load(MOE_TOKENIZER_DIR);
}

const rpc_error& error_of(const std::variant<std::vector<int32_t>, rpc_error>& r) {
  return std::get<rpc_error>(r);
}

}  // namespace

TEST_CASE("prompt_ids_of: text gets BOS, chat goes through the template, ids pass as given") {
  auto tok = real_tokenizer();
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  generate_request text{.kind = prompt_kind::text, .prompt = "Hello world"};
  CHECK(std::get<std::vector<int32_t>>(prompt_ids_of(text, *tok, 129280)) ==
        tok->encode("Hello world", true));
  generate_request chat{.kind = prompt_kind::chat, .messages = {{"user", "Hi"}}};
  CHECK(std::get<std::vector<int32_t>>(prompt_ids_of(chat, *tok, 129280)) ==
        tok->encode(apply_chat_template({{"user", "Hi"}}, true)));
  generate_request ids{.kind = prompt_kind::token_ids, .input_ids = {0, 5, 999}};
  CHECK(std::get<std::vector<int32_t>>(prompt_ids_of(ids, *tok, 1000)) == std::vector<int32_t>{0, 5, 999});
}

TEST_CASE("prompt_ids_of: ids outside the model's vocabulary and empty prompts are 422") {
  auto tok = real_tokenizer();
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  generate_request ids{.kind = prompt_kind::token_ids, .input_ids = {0, 1000}};
  CHECK(error_of(prompt_ids_of(ids, *tok, 1000)).code == rpc_errc::validation);
  CHECK(error_of(prompt_ids_of(ids, *tok, 1000)).message.starts_with("input_ids[1]: "));
  generate_request text{.kind = prompt_kind::text, .prompt = "Hello"};
  CHECK(error_of(prompt_ids_of(text, *tok, 1000)).message.starts_with("prompt: "));
  generate_request empty{.kind = prompt_kind::token_ids};
  CHECK(error_of(prompt_ids_of(empty, *tok, 1000)).message.starts_with("input_ids: "));
}
