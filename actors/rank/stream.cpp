// actors/rank/stream.cpp
#include "actors/rank/stream.hpp"

#include <exception>

namespace moe {

cpu_stream::cpu_stream(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

cpu_stream::~cpu_stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void cpu_stream::enqueue(std::function<void()> work, std::function<void(const std::string&)> on_done) {
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
    {
      std::lock_guard lock(mutex_);
      --num_pending_;
    }
    if (next.on_done)
      next.on_done(error);
  }
}

}  // namespace moe
