// kernels/tokenizer/bpe.hpp
// Byte-level BPE over token ids: a word's bytes start as single-byte tokens and the adjacent pair
// with the lowest merge rank is merged until none is left (HF tokenizers' Word::merge_all).
// Results for repeated words come from a bounded cache shared by all threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace moe {

/// One merge rule: tokens `left` and `right` side by side become `merged`.
struct bpe_merge {
  int32_t left = 0, right = 0, merged = 0;
};

class bpe_model {
 public:
  /// `byte_ids[b]` is the token of the single byte b (-1: no such token, the byte is dropped as
  /// HF does without an unk token); `merges` in rank order (rank = index; a repeated pair keeps
  /// its last rank, as HF's map does).
  bpe_model(const std::array<int32_t, 256>& byte_ids, const std::vector<bpe_merge>& merges);
  ~bpe_model();

  /// Appends the tokens of one pre-tokenized word (raw bytes) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;

  struct merge_table;
  struct word_cache;
  std::array<int32_t, 256> byte_ids_;
  std::unique_ptr<merge_table> merges_;
  std::unique_ptr<word_cache> cache_;
};

}  // namespace moe
