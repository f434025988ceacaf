// actors/policy/assignment.cpp
#include "actors/policy/assignment.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace moe {

std::vector<int64_t> best_assignment(const std::vector<std::vector<int64_t>>& gain) {
  const auto n = static_cast<int64_t>(gain.size());
  for (const auto& row : gain)
    if (static_cast<int64_t>(row.size()) != n)
      throw std::invalid_argument("best_assignment: a row of " + std::to_string(row.size()) +
                                  " gains in a matrix of " + std::to_string(n) + " rows");
  // costs to minimize: the gain scaled past any sum of tie-breaks, less 1 on the diagonal
  const auto cost = [&](int64_t i, int64_t j) { return -(gain[i][j] * (n + 1) + (i == j ? 1 : 0)); };
  // the shortest augmenting path form, rows and columns 1-based, column 0 a virtual start
  constexpr int64_t inf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> u(n + 1, 0), v(n + 1, 0), row_of(n + 1, 0), way(n + 1, 0);
  for (int64_t i = 1; i <= n; ++i) {
    row_of[0] = i;
    int64_t j0 = 0;
    std::vector<int64_t> min_to(n + 1, inf);
    std::vector<bool> used(n + 1, false);
    do {
      used[j0] = true;
      const int64_t i0 = row_of[j0];
      int64_t delta = inf, j1 = 0;
      for (int64_t j = 1; j <= n; ++j) {
        if (used[j])
          continue;
        const int64_t reduced = cost(i0 - 1, j - 1) - u[i0] - v[j];
        if (reduced < min_to[j]) {
          min_to[j] = reduced;
          way[j] = j0;
        }
        if (min_to[j] < delta) {
          delta = min_to[j];
          j1 = j;
        }
      }
      for (int64_t j = 0; j <= n; ++j) {
        if (used[j]) {
          u[row_of[j]] += delta;
          v[j] -= delta;
        } else {
          min_to[j] -= delta;
        }
      }
      j0 = j1;
    } while (row_of[j0] != 0);
    do {  // flip the path's pairs
      const int64_t j1 = way[j0];
      row_of[j0] = row_of[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int64_t> column_of(n, -1);
  for (int64_t j = 1; j <= n; ++j)
    column_of[row_of[j] - 1] = j - 1;
  return column_of;
}

}  // namespace moe
