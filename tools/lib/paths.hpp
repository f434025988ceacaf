// tools/lib/paths.hpp
// Where set-up put things.
#pragma once

namespace moe::tools {

/// Directory of the real DeepSeek-V3 tokenizer files installed by set-up.
const char* default_tokenizer_dir() noexcept;

}  // namespace moe::tools
