// actors/node_join.cpp
#include "actors/node_join.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>
#include <optional>
#include <thread>

#include "actors/errors.hpp"

namespace moe {

node_roster join_node(caf::actor_system& sys, const cluster_node& node, const std::string& cluster,
                      const std::string& token, const std::string& who, const caf::actor& front,
                      std::chrono::steady_clock::time_point deadline) {
  const std::string where = "node " + node.name + " at " + node.host + ":" + std::to_string(node.port);
  const auto began = std::chrono::steady_clock::now();
  // "node N at H:P did not answer (waited 2.0 s): why"
  const auto unanswered = [&](const std::string& why) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    std::string out = where;
    out.append(" did not answer (waited ").append(s).append("): ").append(why);
    return input_error(out);
  };
  const auto left = [&] {
    return std::chrono::duration_cast<caf::timespan>(
      std::max(std::chrono::steady_clock::duration(std::chrono::milliseconds(100)),
               deadline - std::chrono::steady_clock::now()));
  };
  for (;;) {
    auto gate = sys.middleman().remote_actor<node_gate_actor>(node.host, static_cast<uint16_t>(node.port));
    if (gate) {
      caf::scoped_actor self{sys};
      std::optional<node_roster> roster;
      std::string refused;
      bool lost = false;  // the node went away between connecting and answering: try again
      self->request(*gate, left(), join_atom::value, cluster, token, who, front)
        .receive([&](node_roster& r) { roster = std::move(r); },
                 [&](caf::error& e) {
                   lost = error_text(e).empty();
                   refused = lost ? sys.render(e) : error_text(e);
                 });
      if (roster)
        return std::move(*roster);
      if (!lost)
        throw input_error(refused);
      if (std::chrono::steady_clock::now() > deadline)
        throw unanswered(refused);
    } else if (std::chrono::steady_clock::now() > deadline) {
      throw unanswered(sys.render(gate.error()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace moe
