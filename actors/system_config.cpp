// actors/system_config.cpp
#include "actors/system_config.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/timestamp.hpp>
#include <sys/prctl.h>

#include "actors/errors.hpp"

namespace moe {

void configure_actor_system(caf::actor_system_config& cfg) {
  add_serve_error_category(cfg);
  cfg.set("work-stealing.moderate-sleep-duration", caf::timespan{0});
  // Timed waits end when due, not up to Linux's default 50 us timer slack later; threads the
  // actor system starts from here inherit it.
  prctl(PR_SET_TIMERSLACK, 1UL);
}

}  // namespace moe
