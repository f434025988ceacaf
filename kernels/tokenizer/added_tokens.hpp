// kernels/tokenizer/added_tokens.hpp
// Finds added tokens (special or not) in raw text before pre-tokenization, as HF's
// AddedVocabulary does: leftmost-longest matches, tokens with normalized=false first over the
// whole text, then tokens with normalized=true over the gaps (there is no normalizer here), with
// the single_word, lstrip and rstrip flags applied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

/// An entry of tokenizer.json's "added_tokens".
struct added_token {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

/// A stretch of the text: an added token (token_id >= 0) or plain text to pre-tokenize (-1).
struct text_segment {
  std::string_view text;
  int32_t token_id = -1;
};

class added_token_matcher {
 public:
  explicit added_token_matcher(const std::vector<added_token>& tokens);

  /// Appends the segments of `text`, in order, to `out`.
  void split(std::string_view text, std::vector<text_segment>& out) const;

 private:
  /// A byte trie over one group of tokens (normalized or not).
  struct trie {
    struct node {
      int32_t token_idx = -1;  // index into tokens_ when a token ends here
      std::vector<std::pair<unsigned char, int32_t>> children;
    };
    std::vector<node> nodes{1};
    bool first_byte[256] = {};

    void insert(std::string_view content, int32_t token_idx);
    /// The longest token starting at text[pos], or -1.
    [[nodiscard]] int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  };

  void split_group(const trie& group, std::string_view text, const trie* next_group,
                   std::vector<text_segment>& out) const;

  std::vector<added_token> tokens_;
  trie raw_, normalized_;
};

}  // namespace moe
