// kernels/tokenizer/incremental_decoder.cpp
// Streaming detokenization: hold back the bytes of an unfinished UTF-8 character.
#include "kernels/tokenizer/tokenizer.hpp"
#include "kernels/tokenizer/utf8.hpp"

namespace moe {

incremental_decoder::incremental_decoder(std::shared_ptr<const tokenizer> tok, bool skip_special)
    : tok_(std::move(tok)), skip_special_(skip_special) {}

std::string incremental_decoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id))
    return {};
  pending_ += tok_->token_bytes(id);
  const size_t ready = pending_.size() - utf8::unfinished_tail(pending_);
  std::string text;
  utf8::append_lossy(text, std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return text;
}

std::string incremental_decoder::finish() {
  std::string text;
  utf8::append_lossy(text, pending_);
  pending_.clear();
  return text;
}

}  // namespace moe
