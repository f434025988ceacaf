// kernels/cpu/thread_pool.hpp
// A persistent pool for the fast CPU kernels: `num_threads - 1` workers plus the calling thread
// run the tasks of one parallel_for at a time, claimed one by one from a shared counter. Workers
// spin briefly between calls (decode issues hundreds of short ops per token), then sleep.
//
// NOTE: on a shared machine a worker may be descheduled for milliseconds. The caller never waits
// for a worker to *start*: tasks are claimed, not assigned, so the caller runs whatever no worker
// took, and only waits for tasks already claimed to finish. A claim names the job's generation,
// so a worker that wakes up late cannot claim a task of a newer job with the older job's fn.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace moe {

class thread_pool {
 public:
  /// num_threads <= 0 means every hardware thread. With `cpus`, worker i (thread_idx i) pins
  /// itself to cpus[i % cpus.size()]; the caller's thread (index 0) is the caller's to pin.
  explicit thread_pool(int num_threads, std::vector<int> cpus = {});
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  [[nodiscard]] int size() const noexcept { return static_cast<int>(workers_.size()) + 1; }

  /// Calls fn(task_idx, thread_idx) once for every task_idx in [0, num_tasks); thread_idx is in
  /// [0, size()), 0 for the caller. Returns when all tasks are done. Not reentrant: one caller.
  template <class Fn>
  void parallel_for(int64_t num_tasks, Fn&& fn) {
    using fn_type = std::remove_reference_t<Fn>;
    run(
      num_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<fn_type*>(ctx))(task, thread); },
      const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using task_fn = void (*)(void*, int64_t, int);
  struct job {  // written by the caller, read by claimers
    std::atomic<task_fn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> num_tasks{0};
  };

  void run(int64_t num_tasks, task_fn fn, void* ctx);
  void worker_loop(int thread_idx);
  // Claims and runs tasks of generation `gen` until none are left or a newer job started.
  void take_tasks(uint32_t gen, int thread_idx);

  std::vector<std::thread> workers_;
  job jobs_[2];                                     // the job of generation g lives in jobs_[g % 2]
  uint32_t generation_ = 0;                         // the caller's count of published jobs
  alignas(64) std::atomic<uint64_t> claim_{0};      // generation << 32 | next task index
  alignas(64) std::atomic<int64_t> num_done_{0};    // tasks of the current job finished
  alignas(64) std::atomic<uint32_t> published_{0};  // futex word: the latest generation
  std::atomic<int> num_sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace moe
