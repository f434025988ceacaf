// actors/policy/assignment.hpp
// The assignment problem: pair each row of a square matrix of gains with a column of its own so
// that the gains sum to the most (the Hungarian method, O(n^3)). Expert placement uses it to lay
// a plan's rank blocks over the ranks so that the most replicas stay where they are.
#pragma once

#include <cstdint>
#include <vector>

namespace moe {

/// For an n x n matrix `gain` (rows of equal length n), the column each row takes: a bijection
/// maximizing the sum of gain[row][column]. Among the best, ties go to row i taking column i
/// where that costs nothing. Throws std::invalid_argument for a matrix that is not square.
[[nodiscard]] std::vector<int64_t> best_assignment(const std::vector<std::vector<int64_t>>& gain);

}  // namespace moe
