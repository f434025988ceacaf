// tools/lib/load_progress.cpp
#include "tools/lib/load_progress.hpp"

#include <chrono>
#include <memory>

namespace moe::tools {

void load_reporter::update(uint64_t done, uint64_t total, double now_s) {
  const double gb = 1e-9;
  if (done >= total) {  // the end: said only if the load was long enough to talk
    if (lines_ > 0) {
      std::fprintf(out_, "moeserve: loaded %.1f GB of weights in %.0f s\n", gb * static_cast<double>(total),
                   now_s);
      std::fflush(out_);
      ++lines_;
    }
    return;
  }
  if (now_s < first_after_s_ || (lines_ > 0 && now_s - last_s_ < every_s_))
    return;
  std::fprintf(out_, "moeserve: loading weights: %.1f of %.1f GB (%.0f %%), %.0f s\n",
               gb * static_cast<double>(done), gb * static_cast<double>(total),
               100.0 * static_cast<double>(done) / static_cast<double>(total), now_s);
  std::fflush(out_);
  last_s_ = now_s;
  ++lines_;
}

load_progress stderr_load_progress() {
  auto reporter = std::make_shared<load_reporter>(stderr);
  const auto start = std::chrono::steady_clock::now();
  return [reporter, start](uint64_t done, uint64_t total) {
    reporter->update(done, total,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
}

}  // namespace moe::tools
