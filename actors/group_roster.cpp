// actors/group_roster.cpp
#include "actors/group_roster.hpp"

namespace moe {
namespace {

// Each new epoch's steps start this far above the last one's (2^40 steps of a rank per epoch).
constexpr int epoch_step_bits = 40;

}  // namespace

int64_t epoch_first_step(int64_t epoch) noexcept { return epoch << epoch_step_bits; }

int64_t epoch_after(int64_t first_step) noexcept {
  return first_step <= 0 ? 0 : (first_step >> epoch_step_bits) + 1;
}

void introduce_across(const std::vector<caf::actor>& ranks, const std::vector<int64_t>& global_ranks,
                      const std::vector<std::string>& data_addresses, int64_t first_step,
                      std::shared_ptr<const std::vector<layer_placement>> placements,
                      uint64_t placement_epoch) {
  ep_membership m;
  m.peers = ranks;
  m.inboxes.assign(ranks.size(), nullptr);
  m.global_ranks = global_ranks;
  m.data_addresses = data_addresses;
  m.first_step = first_step;
  m.placements = std::move(placements);
  m.placement_epoch = placement_epoch;
  for (const caf::actor& rank : ranks)
    caf::anon_send(rank, peers_atom::value, m);
}

void tell_members(const group_roster& g) {
  for (const caf::actor& rank : g.members.peers)
    caf::anon_send(rank, peers_atom::value, g.members);
}

std::shared_ptr<group_roster> introduce(const std::vector<caf::actor>& ranks, int64_t first_global_rank,
                                        const ep_group& group) {
  auto g = std::make_shared<group_roster>();
  g->members.placements = group.placements;
  for (size_t r = 0; r < ranks.size(); ++r) {
    g->members.peers.push_back(ranks[r]);
    g->members.inboxes.push_back(std::make_shared<ep_inbox>());
    g->members.global_ranks.push_back(first_global_rank + static_cast<int64_t>(r));
  }
  tell_members(*g);
  return g;
}

void rejoin(group_roster& g, size_t r, const caf::actor& fresh) {
  if (g.members.peers.size() < 2)
    return;  // a group of one needs no introduction
  g.members.peers[r] = fresh;
  g.members.inboxes[r] = std::make_shared<ep_inbox>();
  g.members.first_step = epoch_first_step(++g.epoch);
  tell_members(g);
}

void renew(group_roster& g) {
  g.members.first_step = epoch_first_step(++g.epoch);
  tell_members(g);
}

bool keep_placement(const std::string& rank_kind, group_roster* prefill, group_roster* decode,
                    const placement_change& d, bool renew) {
  group_roster* g = rank_kind == "prefill_rank" ? prefill : rank_kind == "decode_rank" ? decode : nullptr;
  if (g == nullptr || !d.placements || (!renew && d.membership_first_step != g->members.first_step))
    return false;
  g->members.placements = d.placements;
  g->members.placement_epoch = d.epoch;
  if (renew)
    moe::renew(*g);
  return true;
}

}  // namespace moe
