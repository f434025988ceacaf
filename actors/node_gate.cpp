// actors/node_gate.cpp
#include "actors/node_gate.hpp"

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

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
                                std::string token, std::vector<node_address> peers) {
  const caf::io::middleman_actor mm = sys.middleman().actor_handle();
  return sys.spawn([roster = std::move(roster), cluster = std::move(cluster), token = std::move(token),
                    peers = std::move(peers),
                    mm](node_gate_actor::pointer self) -> node_gate_actor::behavior_type {
    auto serving = std::make_shared<caf::actor>();  // the front this node serves (null: none)
    self->set_down_handler([serving](caf::down_msg& dm) {
      if (*serving && serving->address() == dm.source)
        *serving = nullptr;  // gone: another may join
    });
    return {
      [=](join_atom, const std::string& their_cluster, const std::string& their_token,
          const std::string& from, const caf::actor& front) -> caf::result<node_roster> {
        std::string refused;
        if (their_cluster != cluster)
          refused = "of cluster \"" + their_cluster + "\", not \"" + cluster + "\"";
        else if (!same_secret(their_token, token))
          refused = "with a wrong cluster token";
        else if (front && *serving && *serving != front)
          refused = "as a second front: it serves another front that is up (stop that one first; a "
                    "front that is lost is let go once its connection times out)";
        if (refused.empty() && front && *serving != front) {
          *serving = front;
          self->monitor(front);  // one already down is reported at once
        }
        if (!refused.empty()) {
          std::fprintf(stderr, "moeserve: node %s refused a peer calling itself \"%s\" %s\n",
                       roster.node.c_str(), from.c_str(), refused.c_str());
          return caf::make_error(serve_errc::refused, "node " + roster.node + " refused: " + refused);
        }
        if (peers.empty())
          return roster;
        // connected already: answered at once; down, refusing or silent: left out (it connects
        // to this node when it joins)
        auto rp = self->make_response_promise<node_roster>();
        struct pending {
          caf::typed_response_promise<node_roster> rp;
          size_t left = 0;
        };
        auto p = std::make_shared<pending>(pending{.rp = rp, .left = peers.size()});
        const auto one_done = [p, roster] {
          if (--p->left == 0)
            p->rp.deliver(roster);
        };
        for (const node_address& peer : peers)
          self->request(mm, std::chrono::milliseconds(500), caf::connect_atom::value, peer.host, peer.port)
            .then([=](const caf::node_id&, const caf::strong_actor_ptr&,
                      const std::set<std::string>&) { one_done(); },
                  [=](const caf::error&) { one_done(); });
        return rp;
      },
    };
  });
}

}  // namespace moe
