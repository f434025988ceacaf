// config/thread_split.hpp
// How many CPU threads each rank runs (`--threads-per-rank auto`, the default): the cores this
// process may use (its affinity mask, and its cgroup's CPU quota where one is set) divided among
// the ranks, each weighted by its role, every rank at least one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/topology.hpp"

namespace moe {

/// The cores the process may use and what limits them.
struct usable_cores {
  int64_t count = 1;
  int64_t affinity = 0;      // CPUs in the affinity mask
  int64_t cgroup_quota = 0;  // ceil(quota / period) of cgroup v2 cpu.max or v1 cfs; 0: no quota
};

/// Reads the affinity mask and the cgroup's CPU quota (Linux); at least 1.
[[nodiscard]] usable_cores detect_usable_cores();

struct thread_split {
  int64_t prefill = 1;  // threads per prefill rank
  int64_t decode = 1;   // threads per decode rank
};

/// `cores` split among the ranks in proportion to their weights (a prefill rank's against a
/// decode rank's), rounded down; what is left goes one thread at a time to decode ranks, then
/// prefill ranks, while a whole role can take one more; at least one thread per rank (more
/// ranks than cores share them). Pure.
[[nodiscard]] thread_split split_threads(int64_t cores, int64_t prefill_ranks, int64_t decode_ranks,
                                         double prefill_weight = 1.0, double decode_weight = 1.0);

/// The threads of each role: --threads-per-rank N for both, or (0, auto) the usable cores split.
[[nodiscard]] thread_split threads_per_rank(const topology_config& topo);

/// The CPU ids of this process's affinity mask, ascending (Linux); empty where it is unreadable.
[[nodiscard]] std::vector<int> affinity_cpus();

/// `--pin-threads on`: the CPUs each rank's threads run on, prefill ranks then decode ranks, in
/// order over `cpus` (the first `usable` of them: the cgroup quota may allow fewer than the mask
/// holds), `split`'s threads per rank of each role. Where the ranks want more threads than there
/// are CPUs, they go round again: a CPU is shared, never left out. Empty lists when `cpus` is
/// empty (nothing is pinned). Pure.
[[nodiscard]] std::vector<std::vector<int>> assign_cpus(const std::vector<int>& cpus, int64_t usable,
                                                        const thread_split& split, int64_t prefill_ranks,
                                                        int64_t decode_ranks);

/// "2 cores (affinity 2, no cgroup quota): 1 thread per prefill rank, 1 per decode rank".
[[nodiscard]] std::string describe(const usable_cores& cores, const thread_split& split);

}  // namespace moe
