// kernels/tokenizer/tokenizer.hpp
// The DeepSeek-V3 tokenizer from a Hugging Face tokenizer.json: added/special tokens matched
// first, the Sequence of Split pre-tokenizers (PCRE2, UTF + UCP), byte-level BPE with merges,
// and the ByteLevel decoder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class tokenizer {
 public:
  /// Loads `<dir>/tokenizer.json` and, when present, `<dir>/tokenizer_config.json` (BOS/EOS
  /// names, add_bos_token). Throws input_error naming the file on anything malformed.
  static std::shared_ptr<const tokenizer> load(const std::filesystem::path& dir);
  ~tokenizer();

  /// Token ids of `text`; special tokens written literally in the text are matched as such.
  /// With add_bos, the BOS id is prepended (as the HF tokenizer does with add_special_tokens).
  [[nodiscard]] std::vector<int32_t> encode(std::string_view text, bool add_bos = false) const;
  /// Text of `ids`; special tokens are kept unless skip_special. Invalid UTF-8 becomes U+FFFD.
  [[nodiscard]] std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  /// Raw bytes of one token (special tokens: their content).
  [[nodiscard]] std::string token_bytes(int32_t id) const;
  [[nodiscard]] std::optional<int32_t> token_id(std::string_view token) const;
  [[nodiscard]] bool is_special(int32_t id) const;
  [[nodiscard]] int32_t vocab_size() const;  // max id + 1
  [[nodiscard]] int32_t bos_id() const;
  [[nodiscard]] int32_t eos_id() const;

 private:
  tokenizer();
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Streaming detokenizer: feed ids one at a time, get only complete UTF-8 text back, never half
/// a character; finish() flushes what is left (invalid bytes as U+FFFD).
class incremental_decoder {
 public:
  explicit incremental_decoder(std::shared_ptr<const tokenizer> tok, bool skip_special = false);
  [[nodiscard]] std::string push(int32_t id);
  [[nodiscard]] std::string finish();

 private:
  std::shared_ptr<const tokenizer> tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

/// One turn of a conversation.
struct chat_message {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
};

/// The DeepSeek-V3 chat format, as its Jinja chat template renders plain conversations:
/// BOS, system prompts, then "<｜User｜>..." / "<｜Assistant｜>...<｜end▁of▁sentence｜>" turns, tool
/// outputs as the template wraps them, and "<｜Assistant｜>" when add_generation_prompt (the
/// server's generate accepts system, user and assistant only). Throws input_error on an unknown role.
[[nodiscard]] std::string apply_chat_template(const std::vector<chat_message>& messages,
                                              bool add_generation_prompt = true);

}  // namespace moe
