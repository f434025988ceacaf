// kernels/cpu/thread_pinning.cpp
#include "kernels/cpu/thread_pinning.hpp"

#include <pthread.h>
#include <sched.h>

namespace moe {

bool pin_this_thread(int cpu) noexcept {
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace moe
