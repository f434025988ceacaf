// net/prompt_tokens.hpp
// A validated generate request's prompt as model token ids: text with BOS, chat through the
// DeepSeek-V3 template, input_ids as given; every id checked against the model's vocabulary
// (the tokenizer's may be larger than a small test model's).
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "kernels/tokenizer/tokenizer.hpp"
#include "net/generate_request.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

/// The prompt's token ids, or a 422 naming the field (an empty prompt, an id >= vocab_size).
[[nodiscard]] std::variant<std::vector<int32_t>, rpc_error> prompt_ids_of(const generate_request& req,
                                                                          const tokenizer& tok,
                                                                          int64_t vocab_size);

}  // namespace moe::net
