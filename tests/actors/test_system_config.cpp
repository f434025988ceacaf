// tests/actors/test_system_config.cpp
// The actor system every moeserve process starts from: moe errors rendered by name, and idle
// scheduler workers that poll without sleeping before they block (CAF 0.17 sleeps 50 us
// between polls by default, which every message hop between rank actors could pay).
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include "actors/errors.hpp"
#include "actors/system_config.hpp"

using namespace moe;

TEST_CASE("configure_actor_system: moe errors by name, no sleeping between scheduler polls") {
  caf::actor_system_config cfg;
  const auto before = caf::get_or(cfg, "work-stealing.moderate-sleep-duration", caf::timespan{-1});
  configure_actor_system(cfg);
  caf::actor_system sys{cfg};
  CHECK(sys.render(caf::make_error(serve_errc::overloaded)) == "moe: overloaded");
  CHECK(before != caf::timespan{0});  // CAF's own default sleeps
  CHECK(caf::get_or(sys.config(), "work-stealing.moderate-sleep-duration", caf::timespan{-1}) ==
        caf::timespan{0});
  // and the system still runs work: a request answered by a spawned actor
  auto echo = sys.spawn([]() -> caf::behavior { return {[](int x) { return x + 1; }}; });
  caf::scoped_actor self{sys};
  int answer = 0;
  self->request(echo, std::chrono::seconds(5), 41).receive([&](int x) { answer = x; }, [](caf::error&) {});
  CHECK(answer == 42);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}
