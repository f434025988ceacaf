// tools/overlap_share.cpp
#include "tools/overlap_share.hpp"

#include <algorithm>

namespace moe::tools {

double hidden_share(const overlap_sample& s) noexcept {
  const double most = std::min(s.compute_s, s.comm_s);
  if (!(most > 0.0))
    return -1.0;
  return std::clamp((s.comm_s - s.exposed_s) / most, 0.0, 1.0);
}

}  // namespace moe::tools
