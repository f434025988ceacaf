// tools/make_model.cpp -- placeholder until implemented.
#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

namespace moe::tools {
void add_make_model(CLI::App& app) { (void)app; }
}  // namespace moe::tools
