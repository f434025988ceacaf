// tools/npy.hpp
// Writes a float32 C-order array as a NumPy .npy file (format version 1.0).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace moe::tools {

/// Throws input_error when the file cannot be written.
void write_npy(const std::filesystem::path& path, const std::vector<float>& data,
               const std::vector<int64_t>& shape);

}  // namespace moe::tools
