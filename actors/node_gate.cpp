// actors/node_gate.cpp
#include "actors/node_gate.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <cstdio>

#include "actors/errors.hpp"

namespace moe {

bool same_secret(const std::string& a, const std::string& b) noexcept {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

node_gate_actor spawn_node_gate(caf::actor_system& sys, node_roster roster, std::string cluster,
                                std::string token) {
  return sys.spawn([roster = std::move(roster), cluster = std::move(cluster),
                    token = std::move(token)](node_gate_actor::pointer) -> node_gate_actor::behavior_type {
    return {
      [=](join_atom, const std::string& their_cluster, const std::string& their_token,
          const std::string& from) -> caf::result<node_roster> {
        std::string refused;
        if (their_cluster != cluster)
          refused = "of cluster \"" + their_cluster + "\", not \"" + cluster + "\"";
        else if (!same_secret(their_token, token))
          refused = "with a wrong cluster token";
        if (refused.empty())
          return roster;
        std::fprintf(stderr, "moeserve: node %s refused a peer calling itself \"%s\" %s\n",
                     roster.node.c_str(), from.c_str(), refused.c_str());
        return caf::make_error(serve_errc::refused, "node " + roster.node + " refused: " + refused);
      },
    };
  });
}

}  // namespace moe
