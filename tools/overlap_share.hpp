// tools/overlap_share.hpp
// The arithmetic of bench-cluster's overlap figures, apart from the runs that feed it: how much
// of a step's communication the schedule hides, as a share of what it could hide at best.
#pragma once

namespace moe::tools {

/// One step (or one phase's median step) as bench-cluster measures it, in seconds.
struct overlap_sample {
  double comm_s = 0;          // the link's busy time (the +link run's trace: its comm lane)
  double compute_s = 0;       // the compute the link can run under: the MoE layers' stages
  double exposed_s = 0;       // what the link added: the step (or its waits) with it minus without
};

/// (comm - exposed) / min(compute, comm): the share of min(compute, comm) hidden. A schedule that
/// hides all it can leaves max(0, comm - compute) exposed and scores 1 on either side of comm =
/// compute (a share of comm alone could not reach 1 once the link carries more than the compute);
/// one that hides nothing leaves comm exposed and scores 0. Clamped to [0, 1]: the exposure is a
/// difference between runs, and noise carries it past either end. -1 when comm or compute is not
/// positive (nothing to hide, or nothing to hide it under).
[[nodiscard]] double hidden_share(const overlap_sample& s) noexcept;

}  // namespace moe::tools
