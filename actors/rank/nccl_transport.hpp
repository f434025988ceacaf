// actors/rank/nccl_transport.hpp
// NCCL under the collective channel (collective_channel.hpp): each rank's engine joins its
// group's communicator on a CUDA device of its own and runs a round as two grouped
// ncclSend/ncclRecv exchanges on a communication stream, the sizes and then the bytes, staged
// through pinned host memory (ranks compute on the CPU: the payloads live there). The
// communicator is non-blocking, and every wait polls, so a close aborts it (ncclCommAbort) even
// when a peer died inside a round. Built where CMake found nvcc and NCCL; elsewhere
// start_nccl_transport says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "actors/rank/collective_channel.hpp"

namespace moe {

/// Whether this moeserve was built with NCCL.
[[nodiscard]] bool nccl_built() noexcept;

/// CUDA devices visible to this process (0 where NCCL was not built or none is there).
[[nodiscard]] int nccl_devices() noexcept;

/// The NCCL transport of a process whose ranks take devices by global rank (modulo the count),
/// at most `ranks_per_group` of one group here. Throws input_error where NCCL was not built, or
/// fewer CUDA devices than that are visible (none at all said as such).
[[nodiscard]] std::shared_ptr<collective_transport> start_nccl_transport(int64_t ranks_per_group = 1);

}  // namespace moe
