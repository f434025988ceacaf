// kernels/checkpoint/tensor_pass.hpp
// Whole-file passes over a loaded safetensors file's tensors, on every core: the helper that runs
// one, and the scan for values no weight may hold.
#pragma once

#include <functional>
#include <vector>

#include "kernels/checkpoint/checkpoint.hpp"

namespace moe {

/// fn(*t) for every t in `todo`, spread over all cores. If some calls throw, the exception of
/// the one earliest in `todo` is rethrown once all have finished (the same error whatever the
/// thread timing).
void for_each_tensor_parallel(const std::vector<tensor_info*>& todo,
                              const std::function<void(tensor_info&)>& fn);

/// Throws input_error naming the file, the tensor, the first offending element (its flat index,
/// and its row and column for a matrix) and its value when an F32, F16 or BF16 tensor holds a NaN
/// or an infinity, or an F8_E4M3 tensor a NaN code (0x7f, 0xff; e4m3 has no infinity). One such
/// value in a weight turns every logit NaN. Integer tensors are not scanned.
void check_finite(const tensor_info& t);

}  // namespace moe
