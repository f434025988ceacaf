// tools/bench_tokenizer.cpp -- placeholder until implemented.
#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

namespace moe::tools {
void add_bench_tokenizer(CLI::App& app) { (void)app; }
}  // namespace moe::tools
