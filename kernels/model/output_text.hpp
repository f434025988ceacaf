// kernels/model/output_text.hpp
// A request's output as it streams (vLLM semantics): the token-level finish rules checked where
// tokens are sampled, and the text side - incremental detokenization with stop strings, holding
// back text while a stop string may still be forming - checked where text is produced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/sampling/sampler.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe {

/// After sampling `token_id` as output token number `num_generated` (1-based) at context length
/// `context_len` (prompt + output): stop on EOS (unless ignore_eos) or a stop token id, length
/// at max_tokens or when the context is full, else none.
[[nodiscard]] finish_reason token_finish(const sampling_params& params, int64_t eos_token_id,
                                         int32_t token_id, int64_t num_generated, int64_t context_len,
                                         int64_t max_context);

/// Where to cut `text` for a stop string: the earliest match that ends after `search_from`, or npos.
[[nodiscard]] size_t find_stop(std::string_view text, const std::vector<std::string>& stop,
                               size_t search_from);

/// Output text of one request, fed token by token.
class text_stream {
 public:
  text_stream(std::shared_ptr<const tokenizer> tok, std::vector<std::string> stop);

  /// Adds a token's text; returns the newly final text. stopped() turns true when a stop string
  /// appeared: the text is then cut before it and nothing after it is ever returned.
  [[nodiscard]] std::string push(int32_t token_id);
  /// The output ended: returns the text still held back (and an unfinished character as U+FFFD).
  [[nodiscard]] std::string finish();
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  [[nodiscard]] const std::string& text() const noexcept { return text_; }

 private:
  [[nodiscard]] std::string emit_upto(size_t end);

  incremental_decoder detok_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

/// The reason a request ended, once its text is final: a stop string that only the text held back
/// to the end completes (text_stream::finish, an unfinished character's U+FFFD included) makes a
/// "length" end a "stop", as its text is cut there.
[[nodiscard]] inline finish_reason final_reason(finish_reason token_reason,
                                                const text_stream& text) noexcept {
  return token_reason == finish_reason::length && text.stopped() ? finish_reason::stop : token_reason;
}

}  // namespace moe
