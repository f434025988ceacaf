// tests/actors/test_node_gate.cpp
// A node's gate hands its roster to a front of its cluster that presents the token, and serves
// one front at a time: a second front is refused while the first is up, and taken once the
// first is gone; the first may join again (a rejoin), and a look without a front (cluster
// ping) is always let in. Another cluster's name or a wrong token is refused.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <string>

#include "actors/errors.hpp"
#include "actors/node_gate.hpp"
#include "actors/system_config.hpp"
#include "eventually.hpp"

namespace {

caf::actor_system_config& remote_config(caf::actor_system_config& cfg) {
  moe::configure_actor_system(cfg);
  moe::configure_remote(cfg, 0.1, 1.0);  // the gate asks the middleman to reach its peers
  return cfg;
}

caf::behavior a_front(caf::event_based_actor*) {
  return {[](moe::stats_atom) {}};
}

}  // namespace

TEST_CASE("node gate: one front at a time, a look always, another cluster or token never") {
  caf::actor_system_config cfg;
  caf::actor_system sys{remote_config(cfg)};
  caf::scoped_actor self{sys};
  const moe::node_roster roster{.node = "decode-0", .first_decode_rank = 2};
  const moe::node_gate_actor gate = moe::spawn_node_gate(sys, roster, "c", "secret");
  // the roster's node name, or the refusal's text
  const auto join = [&](const std::string& cluster, const std::string& token, const caf::actor& front) {
    std::string out;
    self
      ->request(gate, std::chrono::seconds(5), moe::join_atom::value, cluster, token, std::string("f"), front)
      .receive([&](const moe::node_roster& r) { out = r.node + " " + std::to_string(r.first_decode_rank); },
               [&](const caf::error& e) { out = moe::error_text(e); });
    return out;
  };
  const caf::actor first = sys.spawn(a_front), second = sys.spawn(a_front);
  CHECK(join("c", "secret", first) == "decode-0 2");
  CHECK(join("c", "secret", first) == "decode-0 2");         // the same front joins again
  CHECK(join("c", "secret", caf::actor{}) == "decode-0 2");  // a look
  const std::string refused = join("c", "secret", second);
  CHECK(refused.find("node decode-0 refused: as a second front") != std::string::npos);
  CHECK(join("d", "secret", caf::actor{}).find("of cluster \"d\", not \"c\"") != std::string::npos);
  CHECK(join("c", "wrong", first).find("with a wrong cluster token") != std::string::npos);

  // the first front gone: the gate lets go of it and serves the second
  self->monitor(first);
  caf::anon_send_exit(first, caf::exit_reason::user_shutdown);
  self->receive([](const caf::down_msg&) {});
  // the gate's down message may come after ours
  CHECK(moe::testing::eventually([&] { return join("c", "secret", second) == "decode-0 2"; },
                                 std::chrono::seconds(5)));
  CHECK(join("c", "secret", sys.spawn(a_front)).find("as a second front") != std::string::npos);
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
}
