// actors/rank/ep_rank_collective.cpp
// ep_rank_core's NCCL path (cluster_links::collective): a channel per membership with peers in
// other processes, joined with group rank 0's communicator id, and the payloads it carries.
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/system_messages.hpp>
#include <caf/send.hpp>

#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "actors/errors.hpp"
#include "actors/rank/ep_rank_core.hpp"

namespace moe {
namespace {

template <class Payload>
void deliver_payload(const caf::actor& rank, const ep_key& key, int64_t from,
                     const std::vector<char>& bytes) {
  Payload p;
  caf::binary_deserializer source{rank->home_system(), bytes};
  caf::deserializer& f = source;
  if (auto err = f(p))
    throw std::runtime_error("a payload from group rank " + std::to_string(from) + " does not decode");
  // every rank runs the same rounds in the same order; anything else means they no longer match
  if (p.key != key || p.src_rank != from)
    throw std::runtime_error("group rank " + std::to_string(from) + " sent step " +
                             std::to_string(p.key.step) + " layer " + std::to_string(p.key.layer_idx) +
                             " in the round of step " + std::to_string(key.step) + " layer " +
                             std::to_string(key.layer_idx));
  caf::anon_send(rank, dispatch_atom::value, std::move(p));
}

}  // namespace

void ep_rank_core::open_channel(const ep_membership& m, int64_t rank) {
  close_channel();
  if (!links_.collective)
    return;
  std::vector<bool> remote(m.peers.size(), false);
  bool any = false;
  for (size_t r = 0; r < m.peers.size(); ++r)
    if (static_cast<int64_t>(r) != rank && !m.inboxes[r])
      any = remote[r] = true;
  if (!any)
    return;
  const caf::actor self = self_;
  const std::string role = role_;
  auto deliver = [self](ep_payload kind, const ep_key& key, int64_t from, const std::vector<char>& bytes) {
    if (kind == ep_payload::dispatch)
      deliver_payload<ep_dispatch>(self, key, from, bytes);
    else
      deliver_payload<ep_combine>(self, key, from, bytes);
  };
  auto fail = [self, role, name = links_.collective->name()](const std::string& why) {
    // the group cannot go on over this communicator: the rank leaves, and its group is renewed
    std::fprintf(stderr, "moeserve: %s rank: %s exchange failed: %s\n", role.c_str(), name.c_str(),
                 why.c_str());
    caf::anon_send(self, caf::exit_msg{self.address(),
                                       caf::make_error(serve_errc::unavailable, name + ": " + why)});
  };
  const int64_t global = rank < static_cast<int64_t>(m.global_ranks.size()) ? m.global_ranks[rank] : rank;
  auto channel = std::make_shared<collective_channel>(round_book(rank, remote),
                                                      links_.collective->engine(global, rank, remote),
                                                      std::move(deliver), std::move(fail));
  std::optional<std::vector<char>> id;
  if (rank == 0) {  // makes the communicator's id and tells every other member
    const std::vector<char> made = links_.collective->make_id();
    const collective_id told{.first_step = m.first_step, .bytes = {made.begin(), made.end()}};
    for (size_t r = 1; r < m.peers.size(); ++r)
      caf::anon_send(m.peers[r], nccl_atom::value, told);
    id = made;
  } else if (early_id_ && early_id_->first_step == m.first_step) {
    id = std::vector<char>(early_id_->bytes.begin(), early_id_->bytes.end());
  }
  if (early_id_ && early_id_->first_step <= m.first_step)
    early_id_.reset();
  if (id)
    channel->start(std::move(*id));
  std::lock_guard lock{channel_mutex_};
  channel_ = std::move(channel);
  channel_first_step_ = m.first_step;
  channel_peers_ = m.peers;
}

void ep_rank_core::close_channel() {
  std::shared_ptr<collective_channel> old;
  {
    std::lock_guard lock{channel_mutex_};
    old = std::move(channel_);
    channel_first_step_ = -1;
    channel_peers_.clear();
  }
  if (old)
    old->close();  // a round under way is aborted: a dead peer never enters it
}

void ep_rank_core::on_collective_id(collective_id id) {
  std::shared_ptr<collective_channel> channel;
  {
    std::lock_guard lock{channel_mutex_};
    if (channel_ && id.first_step == channel_first_step_)
      channel = channel_;
  }
  if (channel) {
    channel->start(std::vector<char>(id.bytes.begin(), id.bytes.end()));
    return;
  }
  if (id.first_step > channel_first_step_ && (!early_id_ || early_id_->first_step < id.first_step))
    early_id_ = std::move(id);  // its membership is on the way
}

collective_stats ep_rank_core::collective_moved() const {
  std::lock_guard lock{channel_mutex_};
  return channel_ ? channel_->stats() : collective_stats{};
}

template <class Payload>
bool ep_rank_core::send_collective(int64_t dest_rank, const Payload& p) {
  std::shared_ptr<collective_channel> channel;
  std::vector<caf::actor> announce;
  {
    std::lock_guard lock{channel_mutex_};
    if (!channel_)
      return false;
    if (p.key.step < channel_first_step_)
      return true;  // a step of the membership before: abandoned, and its channel is gone
    channel = channel_;
    if (p.key.step > announced_step_) {  // a peer with nothing to do begins the step too
      announced_step_ = p.key.step;
      announce = channel_peers_;
    }
  }
  for (size_t r = 0; r < announce.size(); ++r)
    if (announce[r] != self_)
      caf::anon_send(announce[r], dispatch_atom::value, p.key.step);
  std::vector<char> bytes;
  caf::binary_serializer sink{self_->home_system(), bytes};
  caf::serializer& f = sink;
  if (auto err = f(const_cast<Payload&>(p)))  // the inspect functions take non-const references
    throw std::logic_error("ep_rank_core: a payload does not serialize");
  const ep_payload kind = std::is_same_v<Payload, ep_dispatch> ? ep_payload::dispatch : ep_payload::combine;
  channel->stage(kind, p.key, dest_rank, std::move(bytes));
  return true;
}

template bool ep_rank_core::send_collective(int64_t, const ep_dispatch&);
template bool ep_rank_core::send_collective(int64_t, const ep_combine&);

}  // namespace moe
