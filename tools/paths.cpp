// tools/paths.cpp -- where set-up put things.
#include "tools/commands.hpp"

namespace moe::tools {
const char* default_tokenizer_dir() noexcept { return MOE_TOKENIZER_DIR; }
}  // namespace moe::tools
