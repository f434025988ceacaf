// kernels/tokenizer/pre_tokenizer.cpp
// Each stage is one compiled regex; split() recurses stage by stage over the pieces.
#include "kernels/tokenizer/pre_tokenizer.hpp"

#include <pcre2.h>

#include <array>
#include <string>

#include "config/model_config.hpp"
#include "kernels/tokenizer/ascii_matchers.hpp"

namespace moe {
namespace {

struct code_deleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct match_data_deleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

/// A per-thread JIT stack larger than the default 32 KiB, for long runs of one character class.
struct jit_stack_holder {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  jit_stack_holder() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~jit_stack_holder() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

pcre2_match_context* thread_match_context() {
  thread_local jit_stack_holder holder;
  return holder.context;
}

/// Index of the first byte >= 0x80 in `s` at or after `from`, or s.size().
size_t first_non_ascii(std::string_view s, size_t from) {
  while (from < s.size() && static_cast<unsigned char>(s[from]) < 0x80)
    ++from;
  return from;
}

bool is_ascii(std::string_view s) { return first_non_ascii(s, 0) == s.size(); }

// HF's regex engine (Oniguruma) and JavaScript take \s as \t-\r, U+0085 and the Unicode
// separators (Z); PCRE2 with UCP also counts U+180E (the Mongolian vowel separator, no longer a
// space since Unicode 6.3), so " \u180e" would split as one run of spaces. \s is spelt out as
// Oniguruma's set, and so is \S outside bracket classes (inside one it stays PCRE2's: the
// DeepSeek-V3 patterns have none). POSIX [:classes:] inside brackets are not tracked.
std::string with_oniguruma_spaces(std::string_view pattern) {
  constexpr std::string_view space = "\\t-\\r\\x{85}\\p{Z}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[++i];
      if (escaped == 's')
        out += in_class ? std::string(space) : "[" + std::string(space) + "]";
      else if (escaped == 'S' && !in_class)
        out += "[^" + std::string(space) + "]";
      else
        out += {c, escaped};
      continue;
    }
    out += c;
    if (c == '[' && !in_class) {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')  // a ']' first is a literal
        out += pattern[++i];
    } else if (c == ']' && in_class) {
      in_class = false;
    }
  }
  return out;
}

}  // namespace

struct pre_tokenizer::stage {
  std::unique_ptr<pcre2_code, code_deleter> code;
  bool jit = false;
  bool may_start_ascii = true;           // false: an ASCII-only piece cannot match
  ascii_match_fn ascii_match = nullptr;  // replaces the regex on ASCII-only pieces

  int match(std::string_view piece, size_t start, pcre2_match_data* md) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    if (jit)
      return pcre2_jit_match(code.get(), subject, piece.size(), start, 0, md, thread_match_context());
    return pcre2_match(code.get(), subject, piece.size(), start, 0, md, nullptr);
  }
};

pre_tokenizer::pre_tokenizer(const std::vector<std::string>& patterns, std::string_view origin,
                             bool ascii_fast_paths) {
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    const std::string compiled = with_oniguruma_spaces(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset,
                                     nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw input_error(std::string(origin) + ": pre-tokenizer regex does not compile at offset " +
                        std::to_string(error_offset) + " (" + reinterpret_cast<const char*>(message.data()) +
                        "): " + compiled);
    }
    stage s;
    s.code.reset(code);
    s.jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    const uint8_t* first_bytes = nullptr;
    if (pcre2_pattern_info(code, PCRE2_INFO_FIRSTBITMAP, &first_bytes) == 0 && first_bytes) {
      s.may_start_ascii = false;
      for (int byte = 0; byte < 128; ++byte)
        s.may_start_ascii |= (first_bytes[byte / 8] >> (byte % 8)) & 1;
    }
    if (ascii_fast_paths)
      s.ascii_match = ascii_matcher_for(pattern);
    stages_.push_back(std::move(s));
  }
}

pre_tokenizer::~pre_tokenizer() = default;
pre_tokenizer::pre_tokenizer(pre_tokenizer&&) noexcept = default;

void pre_tokenizer::split_into(std::string_view text, void (*sink)(void*, std::string_view),
                               void* ctx) const {
  std::unique_ptr<pcre2_match_data, match_data_deleter> md(pcre2_match_data_create(1, nullptr));
  // Isolated: the matches and the gaps between them all become pieces for the next stage.
  auto run = [&](auto& self, size_t stage_idx, std::string_view piece) -> void {
    if (stage_idx == stages_.size()) {
      sink(ctx, piece);
      return;
    }
    const stage& s = stages_[stage_idx];
    if (!s.may_start_ascii && is_ascii(piece)) {
      self(self, stage_idx + 1, piece);
      return;
    }
    size_t gap_start = 0, search = 0;
    auto emit_match = [&](size_t begin, size_t end) {
      if (begin > gap_start)
        self(self, stage_idx + 1, piece.substr(gap_start, begin - gap_start));
      self(self, stage_idx + 1, piece.substr(begin, end - begin));
      gap_start = search = end;
    };
    size_t ascii_end = 0;  // piece[search, ascii_end) is ASCII
    while (search < piece.size()) {
      if (s.ascii_match) {
        if (ascii_end <= search)
          ascii_end = first_non_ascii(piece, search);
        if (ascii_end > search) {
          // valid when everything the matcher looked at lies in the ASCII run
          size_t last_read = 0;
          const size_t end = s.ascii_match(piece.substr(0, ascii_end), search, last_read);
          if (ascii_end == piece.size() || last_read < ascii_end) {
            if (end > search)
              emit_match(search, end);
            else
              ++search;
            continue;
          }
        }
      }
      if (s.match(piece, search, md.get()) < 0)
        break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.get());
      const size_t begin = ovector[0], end = ovector[1];  // copied before recursing
      if (begin < end) {
        emit_match(begin, end);
        continue;
      }
      search = end + 1;  // empty match: no piece, step one character
      while (search < piece.size() && (static_cast<unsigned char>(piece[search]) & 0xC0) == 0x80)
        ++search;
    }
    if (gap_start < piece.size())
      self(self, stage_idx + 1, piece.substr(gap_start));
  };
  run(run, 0, text);
}

}  // namespace moe
