// kernels/cpu/thread_pinning.hpp
// Pins a thread to one CPU (`--pin-threads on`): a rank's stream thread and its pool's workers
// each to a CPU of their own, so the scheduler does not move them between cores mid-step.
#pragma once

namespace moe {

/// Pins the calling thread to `cpu` (Linux); false (and the thread left as it was) when the
/// CPU is not in the process's mask or the call fails.
bool pin_this_thread(int cpu) noexcept;

}  // namespace moe
