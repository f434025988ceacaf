// tests/tokenizer/real_tokenizer.hpp
// The real DeepSeek-V3 tokenizer for tests, loaded once from MOE_TOKENIZER_DIR; null (and the
// test should skip with a MESSAGE) when set-up has not installed the files.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kernels/tokenizer/tokenizer.hpp"

namespace moe::test {

inline std::shared_ptr<const tokenizer> real_tokenizer() {
  static const std::shared_ptr<const tokenizer> tok = [] {
    const std::filesystem::path dir = MOE_TOKENIZER_DIR;
    return std::filesystem::exists(dir / "tokenizer.json") ? tokenizer::load(dir) : nullptr;
  }();
  return tok;
}

/// The MESSAGE a test prints when it skips for lack of the tokenizer files.
inline std::string missing_tokenizer_message() {
  return "skipped: no tokenizer.json in " MOE_TOKENIZER_DIR " (run tools/setup.sh)";
}

/// tests/tokenizer/vectors.json, written by make_vectors.mjs from the JavaScript tokenizer.
inline const nlohmann::json& vectors() {
  static const nlohmann::json v = [] {
    std::ifstream in(MOE_SOURCE_DIR "/tests/tokenizer/vectors.json");
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
  }();
  return v;
}

}  // namespace moe::test
