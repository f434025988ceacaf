// tools/lib/paths.cpp
#include "tools/lib/paths.hpp"

namespace moe::tools {
const char* default_tokenizer_dir() noexcept { return MOE_TOKENIZER_DIR; }
}  // namespace moe::tools
