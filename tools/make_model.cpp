// tools/make_model.cpp
// `moeserve make-model`: writes a random-weight checkpoint (tools/lib/random_checkpoint.hpp).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"
#include "tools/lib/paths.hpp"
#include "tools/lib/random_checkpoint.hpp"

namespace moe::tools {

void add_make_model(CLI::App& app) {
  auto opts = std::make_shared<make_model_options>();
  CLI::App* cmd = app.add_subcommand("make-model",
                                     "write a random-weight DeepSeek-V3-architecture checkpoint");
  cmd->add_option("--preset", opts->preset, "model size")
    ->check(CLI::IsMember({"tiny", "small"}))
    ->required();
  cmd->add_option("--seed", opts->seed, "random seed (same seed -> identical files)")
    ->check(non_negative_integer);
  cmd->add_flag("--fp8", opts->fp8, "FP8 e4m3 linear weights with 128x128 block scales");
  cmd->add_option("--shards", opts->num_shards, "number of safetensors files (> 1 adds the index)");
  cmd->add_option("--vocab-size", opts->vocab_size, "vocabulary rows (default 129280)");
  cmd->add_option("--router-skew", opts->router_skew,
                  "gate biases that skew the expert load Zipf-like with this exponent (0..4; 0: even)");
  cmd
    ->add_option("--tokenizer-dir", opts->tokenizer_dir,
                 "directory with tokenizer.json, tokenizer_config.json")
    ->default_str(default_tokenizer_dir());
  cmd->add_option("--out", opts->out, "output directory")->required();
  cmd->callback([opts] {
    opts->progress = opts->preset == "small";
    const auto start = std::chrono::steady_clock::now();
    make_model(*opts);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string skew = opts->router_skew > 0.0 ? ", router skew " + std::to_string(opts->router_skew)
                                                     : "";
    std::printf("make-model: wrote %s (preset %s%s%s, seed %llu) in %.1f s\n", opts->out.c_str(),
                opts->preset.c_str(), opts->fp8 ? ", fp8" : "", skew.c_str(),
                static_cast<unsigned long long>(opts->seed), secs);
  });
}

}  // namespace moe::tools
