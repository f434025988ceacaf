// tests/actors/actor_fixture.hpp
// One fresh CAF actor system per test case, with a scoped actor to talk to it.
#pragma once

#include <caf/all.hpp>

#include "actors/errors.hpp"

namespace moe::testing {

struct actor_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;

  static caf::actor_system_config& tune(caf::actor_system_config& c) {
    c.set("scheduler.max-threads", 2);
    add_serve_error_category(c);
    return c;
  }
  actor_fixture() : sys{tune(cfg)}, self{sys} {}
};

}  // namespace moe::testing
