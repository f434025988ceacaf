// actors/rank/stream.hpp
// A rank's stream on the CPU: an ordered executor. Work items run one after another on the
// stream's own thread (never on a CAF scheduler thread); each item's completion callback runs
// right after it, where the owning actor typically anon_sends itself a completion message.
// The CUDA counterpart is a cudaStream_t with cudaLaunchHostFunc completions.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace moe {

class cpu_stream {
 public:
  /// Starts the stream's thread; `name` labels it for debuggers and traces. A `synchronous`
  /// stream has no thread: enqueue runs the item and its completion at once, on the caller's
  /// thread (as CUDA_LAUNCH_BLOCKING=1 does), so a rank under CAF's deterministic test
  /// scheduler runs in one order only. An item that waits for another rank's payload would
  /// wait forever there: synchronous streams serve groups of one rank. A `cpu` >= 0 pins the
  /// stream's thread there (--pin-threads; the thread runs where the OS puts it if that fails).
  explicit cpu_stream(std::string name, bool synchronous = false, int cpu = -1);
  /// Finishes the work already enqueued, then joins the thread.
  ~cpu_stream();
  cpu_stream(const cpu_stream&) = delete;
  cpu_stream& operator=(const cpu_stream&) = delete;

  /// Enqueues `work`; `on_done` runs on the stream thread after it (also if work throws, with
  /// the exception's message, else with an empty string). Never blocks.
  void enqueue(std::function<void()> work, std::function<void(const std::string& error)> on_done);

  /// Items enqueued and not yet finished.
  [[nodiscard]] int64_t num_pending() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  struct item {
    std::function<void()> work;
    std::function<void(const std::string&)> on_done;
  };
  void run();
  static std::string run_work(item& next);  // the error message, empty if none

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<item> queue_;
  int64_t num_pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace moe
