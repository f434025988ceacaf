// actors/policy/pick_window.hpp
// A balancer's balancedness: the load it sent each rank over its last picks (the prefill
// balancer: input tokens; the decode balancer: requests), and mean / max of those sums over
// the ranks (1: even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe {

struct balance_report {
  int64_t num_picks = 0;         // picks in the window (at most its capacity)
  std::vector<double> per_rank;  // load sent to each rank over them
  double mean = 0.0, max = 0.0;
  double balancedness = 0.0;  // mean / max; 0 before any pick
};

class pick_window {
 public:
  /// Throws std::invalid_argument unless num_ranks > 0 and capacity > 0.
  explicit pick_window(int64_t num_ranks, size_t capacity = 256);
  /// A pick of `rank` with `load`; the oldest pick leaves once the window is full.
  void add(int64_t rank, double load);
  [[nodiscard]] balance_report report() const;

 private:
  struct pick {
    int64_t rank = 0;
    double load = 0.0;
  };
  int64_t num_ranks_;
  std::vector<pick> ring_;  // the last picks, oldest at next_ once full
  size_t capacity_, next_ = 0;
};

}  // namespace moe
