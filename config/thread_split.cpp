// config/thread_split.cpp
#include "config/thread_split.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace moe {

namespace {

/// ceil(quota / period) of cgroup v2's cpu.max ("max 100000" or "200000 100000") or v1's
/// cpu.cfs_quota_us / cpu.cfs_period_us; 0 when there is none.
int64_t cgroup_quota() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  int64_t period = 0;
  if (v2 >> quota >> period && quota != "max" && period > 0)
    return std::max<int64_t>(1, (std::stoll(quota) + period - 1) / period);
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  int64_t q = 0;
  if (q1 >> q && p1 >> period && q > 0 && period > 0)
    return std::max<int64_t>(1, (q + period - 1) / period);
  return 0;
}

}  // namespace

usable_cores detect_usable_cores() {
  usable_cores out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    out.affinity = CPU_COUNT(&set);
  try {
    out.cgroup_quota = cgroup_quota();
  } catch (const std::exception&) {
    out.cgroup_quota = 0;  // an unreadable file: no quota
  }
  out.count = std::max<int64_t>(1, out.affinity);
  if (out.cgroup_quota > 0)
    out.count = std::min(out.count, out.cgroup_quota);
  return out;
}

thread_split split_threads(int64_t cores, int64_t prefill_ranks, int64_t decode_ranks, double prefill_weight,
                           double decode_weight) {
  thread_split out;
  const double total = static_cast<double>(prefill_ranks) * prefill_weight +
                       static_cast<double>(decode_ranks) * decode_weight;
  if (cores <= prefill_ranks + decode_ranks || total <= 0.0)
    return out;  // one each: more ranks than cores share them
  const double per_weight = static_cast<double>(cores) / total;
  out.prefill = std::max<int64_t>(1, static_cast<int64_t>(std::floor(per_weight * prefill_weight)));
  out.decode = std::max<int64_t>(1, static_cast<int64_t>(std::floor(per_weight * decode_weight)));
  auto used = [&] { return out.prefill * prefill_ranks + out.decode * decode_ranks; };
  // whole roles take the rest: decode first (its steps set the time between tokens)
  for (bool grew = true; grew;) {
    grew = false;
    if (decode_ranks > 0 && used() + decode_ranks <= cores) {
      ++out.decode;
      grew = true;
    }
    if (prefill_ranks > 0 && used() + prefill_ranks <= cores) {
      ++out.prefill;
      grew = true;
    }
  }
  if (prefill_ranks == 0)
    out.prefill = 1;  // (no such rank: a plain 1)
  if (decode_ranks == 0)
    out.decode = 1;
  return out;
}

std::vector<int> affinity_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set))
      out.push_back(cpu);
  return out;
}

std::vector<std::vector<int>> assign_cpus(const std::vector<int>& cpus, int64_t usable,
                                          const thread_split& split, int64_t prefill_ranks,
                                          int64_t decode_ranks) {
  std::vector<std::vector<int>> out(static_cast<size_t>(prefill_ranks + decode_ranks));
  const size_t n = std::min(cpus.size(), static_cast<size_t>(std::max<int64_t>(1, usable)));
  if (cpus.empty())
    return out;
  size_t next = 0;
  for (size_t r = 0; r < out.size(); ++r) {
    const int64_t threads = static_cast<int64_t>(r) < prefill_ranks ? split.prefill : split.decode;
    for (int64_t t = 0; t < threads; ++t)
      out[r].push_back(cpus[next++ % n]);
  }
  return out;
}

thread_split threads_per_rank(const topology_config& topo) {
  if (topo.threads_per_rank > 0)
    return {topo.threads_per_rank, topo.threads_per_rank};
  return split_threads(detect_usable_cores().count, topo.prefill_ranks, topo.decode_ranks);
}

std::string describe(const usable_cores& cores, const thread_split& split) {
  std::ostringstream out;
  out << cores.count << (cores.count == 1 ? " core" : " cores") << " (affinity " << cores.affinity << ", "
      << (cores.cgroup_quota > 0 ? "cgroup quota " + std::to_string(cores.cgroup_quota)
                                 : std::string("no cgroup quota"))
      << "): " << split.prefill << (split.prefill == 1 ? " thread" : " threads") << " per prefill rank, "
      << split.decode << " per decode rank";
  return out.str();
}

}  // namespace moe
