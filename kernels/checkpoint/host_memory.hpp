// kernels/checkpoint/host_memory.hpp
// How much memory this machine can still give, and the check made before a large allocation
// (weights copied at load, the fast path's packed copies, KV caches), so that a model or cache
// too big for the machine is refused at once with the numbers, not killed later by the kernel's
// out-of-memory killer with no word.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moe {

/// MemAvailable from /proc/meminfo in bytes (what can be allocated without swapping, page cache
/// that can be dropped included); nullopt where it cannot be read.
[[nodiscard]] std::optional<uint64_t> available_memory();

/// The MemAvailable line of /proc/meminfo's text ("MemAvailable:  22758592 kB") in bytes.
[[nodiscard]] std::optional<uint64_t> parse_mem_available(std::string_view meminfo);

/// Throws input_error "<what> would take X GB of memory, but Y GB is available (MemAvailable in
/// /proc/meminfo)<advice>" when `bytes` > `available`; nothing when it fits or `available` is
/// unknown.
void require_memory(uint64_t bytes, std::string_view what, std::string_view advice,
                    std::optional<uint64_t> available = available_memory());

}  // namespace moe
