// kernels/cpu/thread_pool.cpp
// The fast path's persistent thread pool (see thread_pool.hpp for the claiming protocol).
#include "kernels/cpu/thread_pool.hpp"

#include <immintrin.h>

#include <chrono>

#include "kernels/cpu/thread_pinning.hpp"

namespace moe {
namespace {

// How long an idle worker polls for the next job before sleeping on a futex.
constexpr auto spin_budget = std::chrono::microseconds(300);

}  // namespace

thread_pool::thread_pool(int num_threads, std::vector<int> cpus) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) {
    const int cpu = cpus.empty() ? -1 : cpus[static_cast<size_t>(i) % cpus.size()];
    workers_.emplace_back([this, i, cpu] {
      if (cpu >= 0)
        pin_this_thread(cpu);
      worker_loop(i);
    });
  }
}

thread_pool::~thread_pool() {
  stop_.store(true);
  published_.fetch_add(1);
  published_.notify_all();
  for (auto& w : workers_)
    w.join();
}

void thread_pool::take_tasks(uint32_t gen, int thread_idx) {
  const job& j = jobs_[gen % 2];
  const task_fn fn = j.fn.load(std::memory_order_relaxed);
  void* const ctx = j.ctx.load(std::memory_order_relaxed);
  const int64_t num_tasks = j.num_tasks.load(std::memory_order_relaxed);
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    // The fields above belong to job `gen` only while the claim word still names it.
    if (static_cast<uint32_t>(c >> 32) != gen || static_cast<int64_t>(c & 0xffffffffu) >= num_tasks)
      return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    fn(ctx, static_cast<int64_t>(c & 0xffffffffu), thread_idx);
    num_done_.fetch_add(1, std::memory_order_release);
    c = claim_.load(std::memory_order_acquire);
  }
}

void thread_pool::run(int64_t num_tasks, task_fn fn, void* ctx) {
  if (num_tasks <= 0)
    return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t)
      fn(ctx, t, 0);
    return;
  }
  const uint32_t gen = ++generation_;
  job& j = jobs_[gen % 2];
  j.fn.store(fn, std::memory_order_relaxed);
  j.ctx.store(ctx, std::memory_order_relaxed);
  j.num_tasks.store(num_tasks, std::memory_order_relaxed);
  num_done_.store(0, std::memory_order_relaxed);
  claim_.store(uint64_t{gen} << 32, std::memory_order_release);
  published_.store(gen);  // seq_cst: pairs with the sleepers' check
  if (num_sleeping_.load() > 0)
    published_.notify_all();
  take_tasks(gen, 0);
  // Only tasks a worker already claimed are outstanding now.
  for (int spins = 0; num_done_.load(std::memory_order_acquire) < num_tasks; ++spins) {
    if (spins < 4000)
      _mm_pause();
    else
      std::this_thread::yield();  // the claimer lost its core to another process
  }
}

void thread_pool::worker_loop(int thread_idx) {
  uint32_t seen = 0;  // the generation at construction
  for (;;) {
    // Poll for a newer generation, then sleep until one is published.
    auto start = std::chrono::steady_clock::now();
    for (int spins = 1; published_.load(std::memory_order_acquire) == seen; ++spins) {
      _mm_pause();
      if (spins % 64 == 0 && std::chrono::steady_clock::now() - start > spin_budget) {
        num_sleeping_.fetch_add(1);  // seq_cst: the publisher sees us or we see it
        published_.wait(seen);
        num_sleeping_.fetch_sub(1);
        start = std::chrono::steady_clock::now();
      }
    }
    if (stop_.load())
      return;
    seen = published_.load(std::memory_order_acquire);
    take_tasks(seen, thread_idx);
  }
}

}  // namespace moe
