// tools/lib/load_progress.hpp
// What a long weight load tells the user while it runs: a line on stderr now and then once the
// load has taken a while (a quick one prints nothing), and how long it took in the end.
#pragma once

#include <cstdint>
#include <cstdio>

#include "kernels/checkpoint/checkpoint.hpp"

namespace moe::tools {

class load_reporter {
 public:
  /// Writes to `out` from `first_after_s` seconds into the load on, at most every `every_s`.
  explicit load_reporter(std::FILE* out, double first_after_s = 2.0, double every_s = 5.0)
      : out_(out), first_after_s_(first_after_s), every_s_(every_s) {}

  /// `done` of `total` bytes loaded, `now_s` seconds after the load began.
  void update(uint64_t done, uint64_t total, double now_s);
  /// Lines written so far.
  [[nodiscard]] int64_t lines() const noexcept { return lines_; }

 private:
  std::FILE* out_;
  double first_after_s_, every_s_;
  double last_s_ = 0.0;
  int64_t lines_ = 0;
};

/// checkpoint::open's progress callback: a load_reporter on stderr, timed from this call.
[[nodiscard]] load_progress stderr_load_progress();

}  // namespace moe::tools
