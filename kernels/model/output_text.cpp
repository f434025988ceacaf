// kernels/model/output_text.cpp
#include "kernels/model/output_text.hpp"

#include <algorithm>

namespace moe {

namespace {

// Largest cut <= n that does not split a UTF-8 character of s.
size_t utf8_boundary(std::string_view s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
    --n;
  return n;
}

}  // namespace

finish_reason token_finish(const sampling_params& params, int64_t eos_token_id, int32_t token_id,
                           int64_t num_generated, int64_t context_len, int64_t max_context) {
  const auto& ids = params.stop_token_ids;
  if ((!params.ignore_eos && token_id == eos_token_id) ||
      std::find(ids.begin(), ids.end(), token_id) != ids.end())
    return finish_reason::stop;
  if (num_generated >= params.max_tokens || context_len >= max_context)
    return finish_reason::length;
  return finish_reason::none;
}

size_t find_stop(std::string_view text, const std::vector<std::string>& stop, size_t search_from) {
  size_t best = std::string_view::npos;
  for (const std::string& s : stop) {
    if (s.empty())
      continue;
    const size_t from = search_from >= s.size() ? search_from - s.size() + 1 : 0;
    best = std::min(best, text.find(s, from));
  }
  return best;
}

text_stream::text_stream(std::shared_ptr<const tokenizer> tok, std::vector<std::string> stop)
    : detok_(std::move(tok), /*skip_special=*/true), stop_(std::move(stop)) {
  for (const std::string& s : stop_)
    max_stop_ = std::max(max_stop_, s.size());
}

std::string text_stream::emit_upto(size_t end) {
  if (end <= emitted_)
    return {};
  std::string delta = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  return delta;
}

std::string text_stream::push(int32_t token_id) {
  if (stopped_)
    return {};
  const size_t before = text_.size();
  text_ += detok_.push(token_id);
  if (const size_t cut = find_stop(text_, stop_, before); cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    return emit_upto(text_.size());
  }
  const size_t hold = max_stop_ ? max_stop_ - 1 : 0;  // a stop string may still be forming
  return emit_upto(utf8_boundary(text_, text_.size() - std::min(text_.size(), hold)));
}

std::string text_stream::finish() {
  if (!stopped_) {
    const size_t before = text_.size();
    text_ += detok_.finish();
    if (const size_t cut = find_stop(text_, stop_, before); cut != std::string::npos) {
      text_.resize(cut);
      stopped_ = true;
    }
  }
  return emit_upto(text_.size());
}

}  // namespace moe
