// tests/actors/actor_fixture.hpp
// One fresh CAF actor system per test case, with a scoped actor to talk to it.
#pragma once

#include <caf/all.hpp>

#include <chrono>

#include "actors/atoms.hpp"
#include "actors/cluster.hpp"
#include "actors/errors.hpp"
#include "actors/system_config.hpp"
#include "actors/messages.hpp"

namespace moe::testing {

/// A cluster stopped when it goes out of scope: a REQUIRE that fails between its start and its
/// stop ends the test case with its message, instead of leaving the actor system's destructor
/// waiting for actors nobody stops.
struct scoped_cluster : cluster {
  scoped_cluster(cluster c) : cluster(std::move(c)) {}  // NOLINT(google-explicit-constructor)
  scoped_cluster(const scoped_cluster&) = delete;
  scoped_cluster& operator=(const scoped_cluster&) = delete;
  ~scoped_cluster() {
    if (root)
      stop();
  }
};

struct actor_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;

  static caf::actor_system_config& tune(caf::actor_system_config& c) {
    c.set("scheduler.max-threads", 2);
    configure_actor_system(c);
    return c;
  }
  actor_fixture() : sys{tune(cfg)}, self{sys} {}

  /// A rank's stats once it reports nothing running: asks again (at most 1000 times) while its
  /// stream's last completion is still on the way; no sleeping.
  template <class Rank>
  rank_stats idle_stats(const Rank& rank) {
    rank_stats stats{};
    for (int tries = 0; tries < 1000; ++tries) {
      bool failed = false;
      self->request(rank, std::chrono::seconds(5), stats_atom::value)
        .receive([&](const rank_stats& s) { stats = s; }, [&](caf::error&) { failed = true; });
      if (failed || stats.num_running == 0)
        break;
    }
    return stats;
  }
};

}  // namespace moe::testing
