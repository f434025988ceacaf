// net/prompt_fields.hpp
// The wire forms of a prompt shared by generate and tokenize/detokenize: a chat `messages`
// array and an array of token ids. Errors name the field down to the element
// ("messages[1].role: ...", "input_ids[3]: ...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <msgpack/object_fwd.hpp>

#include "kernels/tokenizer/tokenizer.hpp"
#include "net/field_readers.hpp"

namespace moe::net {

/// A non-empty array of {role: "system"|"user"|"assistant", content: str}, at most max_messages
/// of them and max_content_bytes of content in all. Other keys in a message are a 422.
[[nodiscard]] maybe_error read_messages(const msgpack::object& value, size_t max_messages,
                                        size_t max_content_bytes, std::vector<chat_message>& out);

/// An array of at most max_count integers in [0, max_id] (may be empty).
[[nodiscard]] maybe_error read_token_ids(const msgpack::object& value, std::string_view field,
                                         size_t max_count, int64_t max_id, std::vector<int32_t>& out);

}  // namespace moe::net
