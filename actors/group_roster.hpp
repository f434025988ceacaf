// actors/group_roster.hpp
// An expert-parallel group's membership as whoever spawned its ranks keeps it: the ranks in
// order, an inbox each, and the epochs their restarts start. The in-process cluster's supervisor
// keeps one per group (its restarts run on its thread, one at a time); a node of a multi-process
// cluster keeps one per group it hosts whole.
#pragma once

#include <caf/actor.hpp>
#include <caf/send.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/rank/ep_member.hpp"
#include "actors/rank/ep_rank_core.hpp"

namespace moe {

struct group_roster {
  ep_membership members;
  int64_t epoch = 0;  // restarts of its ranks so far
};

/// Tells each rank of the group who its peers are and where their inboxes are.
void tell_members(const group_roster& g);

/// The first membership of a group of `ranks` (global rank ids from `first_global_rank`, the
/// link model's and the trace's numbering), with the group's first placement; told to them.
[[nodiscard]] std::shared_ptr<group_roster> introduce(const std::vector<caf::actor>& ranks,
                                                      int64_t first_global_rank, const ep_group& group);

/// Rank `r` of a group of two or more was restarted: a new epoch with the fresh rank and a fresh
/// inbox for it. The survivors abandon the step they are in (it waits for the dead rank) and
/// run its requests again; the dead rank's requests are placed again by their sessions.
void rejoin(group_roster& g, size_t r, const caf::actor& fresh);

/// A new membership of the same ranks: each abandons the step it is in and takes the roster's
/// placement from the new first step.
void renew(group_roster& g);

/// Keeps an expert balancer's decision `d` for the group of `rank_kind` ("prefill_rank" or
/// "decode_rank"; its roster null where the group is not hosted here) in its roster: recorded
/// when planned for the membership now, or with `renew` whatever the membership, which a new
/// membership then carries (supervisor.hpp's placement_keeper). False when not recorded.
[[nodiscard]] bool keep_placement(const std::string& rank_kind, group_roster* prefill, group_roster* decode,
                                  const placement_change& d, bool renew);

/// The first step of a group's `epoch`-th membership (each epoch's steps start 2^40 above the last's).
[[nodiscard]] int64_t epoch_first_step(int64_t epoch) noexcept;

/// The epoch whose memberships begin above `first_step` (0 for 0): where someone who gives a
/// group memberships starts numbering them when the ranks already hold one of an earlier giver's.
[[nodiscard]] int64_t epoch_after(int64_t first_step) noexcept;

/// Tells the ranks of a group split over processes their membership from `first_step`: no
/// inboxes (each sends its peers their payloads over the data plane at `data_addresses`, one per
/// rank, or as messages where that is empty, and takes theirs into its own), their global
/// ranks, and `placements` of `placement_epoch` (an expert balancer's decision), or none: the
/// whole group takes the one it began with, the survivors of a lost node one over themselves
/// (ep_rank_core::set_membership).
void introduce_across(const std::vector<caf::actor>& ranks, const std::vector<int64_t>& global_ranks,
                      const std::vector<std::string>& data_addresses, int64_t first_step,
                      std::shared_ptr<const std::vector<layer_placement>> placements = nullptr,
                      uint64_t placement_epoch = 0);

}  // namespace moe
