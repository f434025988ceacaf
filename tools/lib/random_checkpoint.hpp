// tools/lib/random_checkpoint.hpp
// What `moeserve make-model` writes: a random-weight DeepSeek-V3-architecture checkpoint (config.json,
// safetensors, tokenizer files) that the loader and the forward pass treat like the real one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "config/model_config.hpp"

namespace moe::tools {

struct make_model_options {
  std::string preset = "tiny";          // "tiny" or "small"
  uint64_t seed = 0;                    // same seed -> byte-identical files
  bool fp8 = false;                     // F8_E4M3 linear weights + 128x128 F32 block scales
  int64_t num_shards = 1;               // > 1: model-0000i-of-0000K + index.json
  std::optional<int64_t> vocab_size;    // default 129280
  double router_skew = 0.0;             // > 0: Zipf-like expert load, exponent ~this (--router-skew)
  std::filesystem::path tokenizer_dir;  // empty -> default_tokenizer_dir()
  std::filesystem::path out;
  bool progress = false;  // tensor count / bytes written to stderr
};

/// The config.json a preset produces (validated); throws input_error for an unknown preset.
[[nodiscard]] model_config make_model_config(const make_model_options& opts);

/// Writes the checkpoint into `opts.out` (created if needed; earlier model*.safetensors and index
/// files there are removed). Throws input_error for bad options or missing tokenizer files.
void make_model(const make_model_options& opts);

}  // namespace moe::tools
