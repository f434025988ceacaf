// tools/overlap_share.hpp
// The arithmetic of bench-cluster's overlap figures, apart from the runs that feed it: how much
// of a step's communication the schedule hides, as a share of what it could hide at best.
#pragma once

#include <vector>

namespace moe::tools {

/// One step (or one phase's median step) as bench-cluster measures it, in seconds.
struct overlap_sample {
  double comm_s = 0;     // the link's busy time (the +link run's trace: its comm lane)
  double compute_s = 0;  // the compute the link can run under: the MoE layers' stages
  double exposed_s = 0;  // what the link added: the step (or its waits) with it minus without
};

/// (comm - exposed) / min(compute, comm): the share of min(compute, comm) hidden. A schedule that
/// hides all it can leaves max(0, comm - compute) exposed and scores 1 on either side of comm =
/// compute (a share of comm alone could not reach 1 once the link carries more than the compute);
/// one that hides nothing leaves comm exposed and scores 0. Clamped to [0, 1]: the exposure is a
/// difference between runs, and noise carries it past either end. -1 when comm or compute is not
/// positive (nothing to hide, or nothing to hide it under).
[[nodiscard]] double hidden_share(const overlap_sample& s) noexcept;

/// One step of a run whose link carries only every other step's messages
/// (link_model_config::even_steps_only), in seconds, from the trace.
struct step_sample {
  double step_s = 0;  // the step's wall time
  double wait_s = 0;  // its time outside compute spans
  double moe_s = 0;   // its compute in the MoE layers' stages
  double comm_s = 0;  // the link's busy time in it: 0 for a step off the link
};

/// hidden_share of every step on the link against its neighbours off it, in step order: the
/// exposure is its time minus the mean of its neighbours' (one at either end of the run), from
/// step times (`hidden`) and from the time outside compute (`by_waits`). Neighbouring steps see
/// the same moment of the machine and nearly the same batch, so the two runs a comparison across
/// runs needs, and the machine's drift between them, drop out. Left out: the run's first step
/// (a new cluster's first step runs 10-30 % slower, link or not), a step on the link next to
/// another on it, and one whose comm is under half the median comm of the run's steps on the
/// link (a decode run's first steps, while most prompts are still in prefill, carry little).
struct neighbour_shares {
  std::vector<double> hidden, by_waits;
};
[[nodiscard]] neighbour_shares shares_against_neighbours(const std::vector<step_sample>& steps);

}  // namespace moe::tools
