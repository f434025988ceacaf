// net/prompt_tokens.cpp
#include "net/prompt_tokens.hpp"

#include <string>

namespace moe::net {

std::variant<std::vector<int32_t>, rpc_error> prompt_ids_of(const generate_request& req, const tokenizer& tok,
                                                            int64_t vocab_size) {
  std::vector<int32_t> ids;
  std::string field;
  switch (req.kind) {
    case prompt_kind::text:
      ids = tok.encode(req.prompt, /*add_bos=*/true);
      field = "prompt";
      break;
    case prompt_kind::chat:  // the template starts with BOS
      ids = tok.encode(apply_chat_template(req.messages, /*add_generation_prompt=*/true));
      field = "messages";
      break;
    case prompt_kind::token_ids:
      ids = req.input_ids;
      field = "input_ids";
      break;
  }
  if (ids.empty())
    return make_error(rpc_errc::validation, field + ": the prompt has no tokens");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab_size)
      return make_error(rpc_errc::validation,
                        (req.kind == prompt_kind::token_ids ? field + "[" + std::to_string(i) + "]" : field) +
                          ": token id " + std::to_string(ids[i]) + " is outside the model's " +
                          std::to_string(vocab_size) + "-token vocabulary");
  return ids;
}

}  // namespace moe::net
