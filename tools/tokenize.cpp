// tools/tokenize.cpp -- placeholder until implemented.
#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

namespace moe::tools {
void add_tokenize(CLI::App& app) { (void)app; }
}  // namespace moe::tools
