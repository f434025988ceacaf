// kernels/tokenizer/pre_tokenizer.hpp
// HF's Sequence of Split(Regex, behavior Isolated) pre-tokenizers: each regex splits every piece
// the previous one produced into its matches and the gaps between them, all kept. Regexes are
// PCRE2 in UTF + UCP mode (JIT when available) with \s as Oniguruma's (HF's engine) set, and
// invalid UTF-8 in the text is tolerated.
// ASCII-only pieces take hand-written matchers where one exists for the pattern.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace moe {

class pre_tokenizer {
 public:
  /// Compiles `patterns` (already JSON-unescaped); `origin` names the file in errors.
  /// ascii_fast_paths false: always PCRE2 (tests compare the two).
  pre_tokenizer(const std::vector<std::string>& patterns, std::string_view origin,
                bool ascii_fast_paths = true);
  ~pre_tokenizer();
  pre_tokenizer(pre_tokenizer&&) noexcept;

  /// Calls on_piece(std::string_view) for each piece of `text`: views into it, in order,
  /// covering it.
  template <class F>
  void split(std::string_view text, F&& on_piece) const {
    using fn = std::remove_reference_t<F>;
    split_into(
      text, [](void* ctx, std::string_view piece) { (*static_cast<fn*>(ctx))(piece); }, &on_piece);
  }

  /// Appends the pieces of `text` to `pieces`.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const {
    split(text, [&](std::string_view piece) { pieces.push_back(piece); });
  }

 private:
  void split_into(std::string_view text, void (*sink)(void*, std::string_view), void* ctx) const;

  struct stage;
  std::vector<stage> stages_;
};

}  // namespace moe
