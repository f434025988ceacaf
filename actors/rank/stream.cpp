// actors/rank/stream.cpp
#include "actors/rank/stream.hpp"

#include <exception>

#include "kernels/cpu/thread_pinning.hpp"

namespace moe {

cpu_stream::cpu_stream(std::string name, bool synchronous, int cpu) : name_(std::move(name)) {
  if (!synchronous)
    thread_ = std::thread([this, cpu] {
      if (cpu >= 0)
        pin_this_thread(cpu);
      run();
    });
}

cpu_stream::~cpu_stream() {
  if (!thread_.joinable())
    return;  // synchronous: nothing pending
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void cpu_stream::enqueue(std::function<void()> work, std::function<void(const std::string&)> on_done) {
  if (!thread_.joinable()) {
    item now{std::move(work), std::move(on_done)};
    const std::string error = run_work(now);
    if (now.on_done)
      now.on_done(error);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(work), std::move(on_done)});
    ++num_pending_;
  }
  wake_.notify_one();
}

int64_t cpu_stream::num_pending() const {
  std::lock_guard lock(mutex_);
  return num_pending_;
}

void cpu_stream::run() {
  for (;;) {
    item next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return;  // stopping and drained
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const std::string error = run_work(next);
    {
      std::lock_guard lock(mutex_);
      --num_pending_;
    }
    if (next.on_done)
      next.on_done(error);
  }
}

std::string cpu_stream::run_work(item& next) {
  std::string error;
  try {
    next.work();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty())
      error = "unknown error";
  } catch (...) {
    error = "unknown error";
  }
  return error;
}

}  // namespace moe
