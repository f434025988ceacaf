// actors/rank/ep_member.hpp
// The messages every rank of an expert-parallel group handles (prefill and decode ranks extend it).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <memory>
#include <optional>
#include <string>

#include "actors/errors.hpp"
#include "actors/kernel_inspect.hpp"
#include "actors/rank/ep_rank_core.hpp"
#include "actors/rank/expert_fetch.hpp"

namespace moe {

using ep_member_actor = caf::typed_actor<
  // Joins an expert-parallel group: the peers in group-rank order and their global rank ids.
  caf::reacts_to<peers_atom, ep_membership>,
  // A peer began step N: its dispatch for the experts this rank holds is in the rank's inbox
  // (payloads themselves go from stream to inbox, not through actors).
  caf::reacts_to<dispatch_atom, int64_t>,
  // A peer's payload for this rank, when the peer runs in another process (a group across
  // processes: ep_membership without inboxes); into the rank's own inbox.
  caf::reacts_to<dispatch_atom, ep_dispatch>, caf::reacts_to<dispatch_atom, ep_combine>,
  // Group rank 0's NCCL communicator id for the membership of a first step, where payloads
  // between processes go over NCCL (actors/rank/collective_channel.hpp).
  caf::reacts_to<nccl_atom, collective_id>,
  // The rank's stream finished a step's LOGITS stage: step, micro-batch, stage_kind, error (internal).
  caf::reacts_to<stage_atom, int64_t, int64_t, int32_t, std::string>,
  // Fault injection for tests: crash the next time at this point (actors/rank/fault_point.hpp),
  // once; true, or serve_errc::invalid for a point this rank does not have.
  caf::replies_to<fault_atom, std::string>::with<bool>,
  // The stream reached the armed point of a step's exchange: crash (internal).
  caf::reacts_to<fault_atom>,
  // The tokens this rank's gate routed to each expert over its window of steps.
  caf::replies_to<expert_load_atom>::with<expert_load>,
  // Count over this many steps from now on (> 0; what was counted is dropped): true, or invalid.
  caf::replies_to<expert_load_atom, int64_t>::with<bool>,
  // A placement change, phase one (ep_rank_core::prepare_placement): the step this rank begins
  // next, or serve_errc::invalid saying why it does not fit.
  caf::replies_to<placement_atom, placement_change>::with<int64_t>,
  // Phase two: (epoch, switch step, membership first step) -> true once this rank began the
  // switch step with it; false when refused, or dropped by a membership change first.
  caf::replies_to<placement_atom, uint64_t, int64_t, int64_t>::with<bool>,
  // Abandons the prepared change of this epoch.
  caf::reacts_to<placement_atom, uint64_t>,
  // The placement in force: its epoch and, per layer, the physical -> logical rows.
  caf::replies_to<placement_atom>::with<placement_report>,
  // Before phase one: copy the experts this change gives the rank and it lacks from peers that
  // hold them (actors/rank/expert_fetch.hpp): the bytes copied, or why not (invalid: the change
  // does not fit; unavailable: a peer did not send one).
  caf::replies_to<experts_atom, placement_change>::with<int64_t>,
  // A peer's fetch: this rank's copy of (layer, expert), or invalid if it holds none.
  caf::replies_to<experts_atom, int64_t, int32_t>::with<expert_blob>>;

/// A rank's behavior: the ep_member_actor handlers, forwarding to `self->state.core` (an
/// ep_rank_core), followed by the rank's own handlers.
template <class Behavior, class Self, class... Handlers>
[[nodiscard]] Behavior ep_member_behavior(Self self, Handlers... own) {
  return {
    [=](peers_atom, ep_membership& m) { self->state.core->set_membership(std::move(m)); },
    [=](dispatch_atom, int64_t step) { self->state.core->on_peer_step(step); },
    [=](dispatch_atom, ep_dispatch& d) {
      self->state.core->on_peer_payload(std::make_shared<const ep_dispatch>(std::move(d)));
    },
    [=](dispatch_atom, ep_combine& c) {
      self->state.core->on_peer_payload(std::make_shared<const ep_combine>(std::move(c)));
    },
    [=](nccl_atom, collective_id& id) { self->state.core->on_collective_id(std::move(id)); },
    [=](stage_atom, int64_t step, int64_t mb, int32_t stage, const std::string& error) {
      self->state.core->on_stage_done(step, mb, stage, error);
    },
    [=](fault_atom, const std::string& name) -> caf::result<bool> {
      const std::optional<fault_point> point = parse_fault_point(name);
      if (!point)
        return caf::make_error(serve_errc::invalid, "no fault point is called \"" + name +
                                                      "\" (dispatch, combine, handoff, first_decode, hang)");
      try {
        self->state.core->arm_fault(*point);
      } catch (const std::invalid_argument& e) {
        return caf::make_error(serve_errc::invalid, e.what());
      }
      return true;
    },
    [=](fault_atom) { throw injected_fault(self->state.core->armed_fault()); },
    [=](expert_load_atom) { return self->state.core->routed_load(); },
    [=](expert_load_atom, int64_t window_steps) -> caf::result<bool> {
      if (window_steps <= 0)
        return caf::make_error(serve_errc::invalid,
                               "window_steps: expected a count > 0, got " + std::to_string(window_steps));
      self->state.core->set_load_window(window_steps);
      return true;
    },
    [=](placement_atom, placement_change& change) -> caf::result<int64_t> {
      try {
        const uint64_t epoch = change.epoch;
        const int64_t next = self->state.core->prepare_placement(std::move(change));
        self->delayed_send(self, placement_hold_timeout, placement_atom::value,
                           epoch);  // no outcome: drop it
        return next;
      } catch (const std::invalid_argument& e) {
        return caf::make_error(serve_errc::invalid, e.what());
      }
    },
    [=](placement_atom, uint64_t epoch, int64_t switch_step, int64_t first_step) -> caf::result<bool> {
      auto rp = self->template make_response_promise<bool>();
      if (!self->state.core->commit_placement(epoch, switch_step, first_step,
                                              [rp](bool held) mutable { rp.deliver(held); }))
        rp.deliver(false);
      return rp;
    },
    [=](placement_atom, uint64_t epoch) { self->state.core->abort_placement(epoch); },
    [=](placement_atom) { return report_placement(*self->state.core); },
    [=](experts_atom, const placement_change& change) -> caf::result<int64_t> {
      auto run = std::make_shared<expert_fetch_run>();
      try {
        run->todo = self->state.core->expert_fetches(change);
      } catch (const std::invalid_argument& e) {
        return caf::make_error(serve_errc::invalid, e.what());
      }
      run->epoch = change.epoch;
      run->done = self->template make_response_promise<int64_t>();
      auto rp = run->done;
      fetch_next_layer<ep_member_actor>(self, std::move(run));
      return rp;
    },
    [=](experts_atom, int64_t layer, int32_t expert) -> caf::result<expert_blob> {
      const std::shared_ptr<const expert_copy> copy = self->state.core->copy_for_peer(layer, expert);
      if (!copy)
        return caf::make_error(serve_errc::invalid, "no copy of expert " + std::to_string(expert) +
                                                      " of layer " + std::to_string(layer) + " here");
      const copy_engine_actor engine = self->state.core->copy_engine();
      if (!engine)
        return expert_blob{.layer = layer, .expert = expert, .bytes = encode_expert(copy->weights)};
      auto rp = self->template make_response_promise<expert_blob>();
      self->request(engine, caf::infinite, experts_atom::value, copy, layer, expert)
        .then([rp](expert_blob& blob) mutable { rp.deliver(std::move(blob)); },
              [=](const caf::error&) mutable {  // encoding cannot fail: the engine is gone
                renew_copy_engine(self, engine);
                rp.deliver(
                  expert_blob{.layer = layer, .expert = expert, .bytes = encode_expert(copy->weights)});
              });
      return rp;
    },
    own...,
  };
}

/// The placement `core` computes with now.
[[nodiscard]] placement_report report_placement(const ep_rank_core& core);

/// Placements for every layer with `num_redundant` extra slots on MoE layers, the default before
/// any expert load is known (default_layer_placement on each MoE layer, empty on dense ones).
[[nodiscard]] std::shared_ptr<const std::vector<layer_placement>> default_placements(
  const model_weights& weights, int64_t num_ranks, int64_t num_redundant);

/// A membership sent to a rank of another process: the peers, their global ranks and data
/// plane addresses, the first step and the placement; no inboxes (each arrives as null: that rank's payloads go to it by
/// message, and the receiver uses its own inbox: ep_rank_core::set_membership).
caf::error inspect(caf::serializer& f, ep_membership& x);
caf::error inspect(caf::deserializer& f, ep_membership& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ep_membership& x) {
  return f(caf::meta::type_name("ep_membership"), x.global_ranks, x.data_addresses, x.first_step,
           x.placement_epoch);
}

}  // namespace moe
