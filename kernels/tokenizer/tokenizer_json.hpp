// kernels/tokenizer/tokenizer_json.hpp
// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json) into plain data, checking that
// the pipeline is one this tokenizer implements: no normalizer, Split/ByteLevel pre-tokenizers,
// a byte-level BPE model and the ByteLevel decoder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tokenizer/added_tokens.hpp"

namespace moe {

/// What the files say, in the files' own terms (byte-level token text).
struct tokenizer_files {
  std::vector<std::pair<std::string, int32_t>> vocab;       // model.vocab
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
  std::vector<added_token> added_tokens;
  std::vector<std::string> split_patterns;  // regexes, applied in order
  std::string bos_token, eos_token;         // contents; empty when unknown
};

/// Parses `<dir>/tokenizer.json` and, when present, `<dir>/tokenizer_config.json`. Throws
/// input_error naming the file when one is missing, malformed or asks for an unsupported step.
[[nodiscard]] tokenizer_files read_tokenizer_files(const std::filesystem::path& dir);

}  // namespace moe
