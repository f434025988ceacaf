// tests/actors/eventually.hpp
// Polls `done` every millisecond until it holds (true) or `limit` passes (false): for state that
// another thread reaches (a channel's thread, an engine), bounded.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace moe::testing {

inline bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace moe::testing
