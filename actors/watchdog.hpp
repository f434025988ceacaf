// actors/watchdog.hpp
// Treats a rank that is alive but makes no progress as dead: every `period` it asks each
// watched child's stats through the supervisor (whichever instance lives now); one that has had
// work and no new step, or has not answered, for `stall_timeout`, and is not waiting on a peer
// (actors/policy/progress_watch.hpp), is logged and killed through the supervisor, which
// restarts it (or escalates, for a kind it cannot restart). Quits with the supervisor.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/supervisor.hpp"

namespace moe {

struct watchdog_config {
  std::vector<std::pair<std::string, int64_t>> watched;  // (kind, index): children answering rank_stats
  std::chrono::milliseconds period{1000};
  std::chrono::milliseconds stall_timeout{30'000};
};

/// The watchdog's kills are counted by the supervisor as restarts of the child.
[[nodiscard]] caf::actor spawn_watchdog(caf::actor_system& sys, supervisor_actor supervisor,
                                        watchdog_config cfg);

}  // namespace moe
