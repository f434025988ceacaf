// kernels/tokenizer/added_tokens.cpp
// Byte tries for the two groups of added tokens and the split that follows HF's find_matches.
#include "kernels/tokenizer/added_tokens.hpp"

#include <pcre2.h>

#include <algorithm>
#include <memory>

#include "kernels/tokenizer/utf8.hpp"

namespace moe {
namespace {

/// Unicode White_Space: HF's `\s` for lstrip/rstrip (Rust regex).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

/// Whether the UTF-8 character `ch` is a word character for single_word: HF's `\w` (Rust regex),
/// here letters, numbers and underscore (Rust's also counts marks and connector punctuation).
bool is_word_char(std::string_view ch) {
  struct pattern {
    pcre2_code* code = nullptr;
    pattern() {
      int error = 0;
      PCRE2_SIZE offset = 0;
      code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(R"(^[\p{L}\p{N}_]$)"), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    }
    ~pattern() { pcre2_code_free(code); }
  };
  static const pattern word;
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(1, nullptr),
                                                                    pcre2_match_data_free);
  return pcre2_match(word.code, reinterpret_cast<PCRE2_SPTR>(ch.data()), ch.size(), 0, 0, md.get(),
                     nullptr) >= 0;
}

/// The last character of `s` (empty if none).
std::string_view last_char(std::string_view s) {
  if (s.empty())
    return s;
  size_t start = s.size() - 1;
  while (start > 0 && s.size() - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    --start;
  return s.substr(start);
}

std::string_view first_char(std::string_view s) {
  if (s.empty())
    return s;
  size_t pos = 0;
  (void)utf8::next(s, pos);
  return s.substr(0, pos);
}

/// Start of the whitespace run that ends `s`.
size_t white_space_run_start(std::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    const std::string_view ch = last_char(s.substr(0, start));
    size_t pos = 0;
    if (!is_white_space(utf8::next(ch, pos)))
      break;
    start -= ch.size();
  }
  return start;
}

/// Length of the whitespace run that starts `s`.
size_t white_space_run_length(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!is_white_space(utf8::next(s, next)))
      break;
    pos = next;
  }
  return pos;
}

}  // namespace

void added_token_matcher::trie::insert(std::string_view content, int32_t token_idx) {
  int32_t node_idx = 0;
  for (const char c : content) {
    const auto byte = static_cast<unsigned char>(c);
    auto& children = nodes[node_idx].children;
    const auto it = std::find_if(children.begin(), children.end(),
                                 [&](const auto& child) { return child.first == byte; });
    if (it != children.end()) {
      node_idx = it->second;
    } else {
      const auto child_idx = static_cast<int32_t>(nodes.size());
      children.emplace_back(byte, child_idx);
      nodes.emplace_back();
      node_idx = child_idx;
    }
  }
  nodes[node_idx].token_idx = token_idx;
  first_byte[static_cast<unsigned char>(content[0])] = true;
}

int32_t added_token_matcher::trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t found = -1;
  int32_t node_idx = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node_idx].children;
    const auto it = std::find_if(children.begin(), children.end(),
                                 [&](const auto& child) { return child.first == byte; });
    if (it == children.end())
      break;
    node_idx = it->second;
    if (nodes[node_idx].token_idx >= 0) {
      found = nodes[node_idx].token_idx;
      length = i + 1 - pos;
    }
  }
  return found;
}

added_token_matcher::added_token_matcher(const std::vector<added_token>& tokens) : tokens_(tokens) {
  for (size_t idx = 0; idx < tokens_.size(); ++idx) {
    if (tokens_[idx].content.empty())
      continue;
    (tokens_[idx].normalized ? normalized_ : raw_).insert(tokens_[idx].content, static_cast<int32_t>(idx));
  }
}

void added_token_matcher::split(std::string_view text, std::vector<text_segment>& out) const {
  split_group(raw_, text, &normalized_, out);
}

void added_token_matcher::split_group(const trie& group, std::string_view text, const trie* next_group,
                                      std::vector<text_segment>& out) const {
  auto emit_gap = [&](size_t begin, size_t end) {
    if (begin >= end)
      return;
    if (next_group)
      split_group(*next_group, text.substr(begin, end - begin), nullptr, out);
    else
      out.push_back({text.substr(begin, end - begin), -1});
  };
  size_t gap_start = 0;  // end of the last emitted token
  size_t pos = 0;
  while (pos < text.size()) {
    if (!group.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t token_idx = group.longest_at(text, pos, length);
    if (token_idx < 0) {
      ++pos;
      continue;
    }
    const added_token& token = tokens_[token_idx];
    size_t begin = pos, end = pos + length;
    pos = end;  // a discarded match is still consumed (find_iter)
    if (token.single_word) {
      const std::string_view before = last_char(text.substr(0, begin));
      const std::string_view after = first_char(text.substr(end));
      if ((!before.empty() && is_word_char(before)) || (!after.empty() && is_word_char(after)))
        continue;
    }
    if (token.lstrip)
      begin = std::max(white_space_run_start(text.substr(0, begin)), gap_start);
    if (token.rstrip)
      end += white_space_run_length(text.substr(end));
    emit_gap(gap_start, begin);
    out.push_back({text.substr(begin, end - begin), token.id});
    gap_start = pos = end;
  }
  emit_gap(gap_start, text.size());
}

}  // namespace moe
