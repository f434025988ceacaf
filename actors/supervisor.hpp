// actors/supervisor.hpp
// An OTP-style supervisor (one-for-one): starts its children from child specs, monitors them
// (never links: a child's death, even by exit_reason::kill, reaches it as a down_msg), restarts
// a dead child with its configuration and re-introduces the new handle to the actors that route
// to it. A child restarted more often than its restart_limits allow is crash-looping: the
// supervisor escalates, logging the child and the count, stops every child and exits with
// serve_errc::crash_loop. Stopping the supervisor (an exit message) stops its children.
// Children can also be added while it runs (the server's stats sampler), and actors that others
// own (connection bridges) can be attached: listed and killable, never restarted.
// Configurable children (actors/live_settings.hpp) are changed through it: it keeps the last
// configuration each accepted and hands it to the child's restarted successor, so that a live
// change survives a crash.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/live_settings.hpp"
#include "actors/messages.hpp"
#include "actors/policy/restart_intensity.hpp"

namespace moe {

enum class restart_policy {
  permanent,  // restarted after any exit
  transient,  // restarted after an abnormal exit; a normal one ends it
  never,      // not restartable (yet): an abnormal exit escalates at once
  elsewhere,  // runs in another process (a node of a multi-process cluster), whose own supervision
              // restarts it: watched and listed, never restarted or escalated here
};

/// The current handle of every child, by kind and index (null when none lives); kind
/// "supervisor" gives the supervisor itself.
using child_lookup = std::function<caf::actor(const std::string& kind, int64_t index)>;

struct child_spec {
  std::string kind;  // e.g. "decode_balancer"
  int64_t index = 0;
  restart_policy restart = restart_policy::permanent;
  /// The child already running, adopted instead of a first start() (may be null).
  caf::actor running;
  /// Spawns the child (again) with its configuration, routing to the `current` handles of
  /// the others; runs on the supervisor.
  std::function<caf::actor(const child_lookup& current)> start;
  /// After a restart: tells the actors that route to it the new handle (may be empty).
  std::function<void(const caf::actor& fresh, const child_lookup& current)> introduce;
  /// Set when the child runs short-lived workers of this kind (the prefill balancer's
  /// sessions): it answers (actors_atom) -> std::vector<actor_info> with each one's index and
  /// (kill_atom, uint64_t index) -> bool, and the supervisor lists and kills them through it.
  std::string worker_kind;
  /// Set when the child takes live configuration (actors/live_settings.hpp).
  bool configurable = false;
};

/// What keeps an expert balancer's decisions for a group (the supervisor, or the node of a
/// multi-process cluster that hosts the group whole): (kind of the group's ranks, decision, renew)
/// -> recorded (placement_keeper says when).
using placement_keeper_actor =
  caf::typed_actor<caf::replies_to<placement_atom, std::string, placement_change, bool>::with<bool>>;

/// A keeper's answer: recorded (true) or not (false), or the actor that keeps the group's
/// decisions elsewhere (a node hosting it whole), which the supervisor hands the request on to.
using placement_kept = std::variant<bool, placement_keeper_actor>;

/// Where an expert balancer's decision is kept (cluster.cpp's group rosters), run on the
/// supervisor's thread, where ranks are restarted: records `decision` as the placement of the
/// group of the ranks of `rank_kind` when it was planned for the group's membership now (false
/// otherwise), or, with `renew`, whatever the membership, and then starts a new membership that
/// carries it (each rank takes it from its first step). A rank restarted later gets the
/// recorded placement with its membership.
using placement_keeper =
  std::function<placement_kept(const std::string& rank_kind, const placement_change& decision, bool renew)>;

using supervisor_actor = caf::typed_actor<
  // Every live child, in start order, then the children's workers (restarts 0).
  caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
  // Fault injection: the child (or worker) exits at once with a non-normal reason,
  // mid-whatever it does; true if it was found.
  caf::replies_to<kill_atom, std::string, int64_t>::with<bool>,
  // The child's current handle (an invalid one when there is none).
  caf::replies_to<lookup_atom, std::string, int64_t>::with<caf::actor>,
  // The child's successor of the instance at `lost`: answered once one other than it lives
  // (at once if it does); serve_errc::unavailable when none will (not restartable, or the
  // supervisor stops).
  caf::replies_to<lookup_atom, std::string, int64_t, caf::actor_addr>::with<caf::actor>,
  // A rank's stats, asked of whichever instance of it lives now (delegated: it answers);
  // serve_errc::unavailable while it is being restarted.
  caf::replies_to<stats_atom, std::string, int64_t>::with<rank_stats>,
  // The routed-token counts of the rank living now as child (kind, index) (ranks only).
  caf::replies_to<expert_load_atom, std::string, int64_t>::with<expert_load>,
  // A live change to configurable child (kind, index): the child's answer (its new epoch and
  // fields), kept for its successors; serve_errc::invalid for a refused change or a child that
  // takes none, serve_errc::unavailable while it is being restarted.
  caf::replies_to<configure_atom, std::string, int64_t, config_fields>::with<versioned_config>,
  // Every configurable child's configuration, in start order (a child being restarted: the
  // last one it accepted, if any).
  caf::replies_to<config_atom>::with<std::vector<versioned_config>>,
  // An expert balancer's decision for the group of the ranks of this kind (placement_keeper):
  // (kind, decision, renew) -> recorded.
  caf::replies_to<placement_atom, std::string, placement_change, bool>::with<bool>,
  // Adds a child and starts it (replacing one of its kind and index that ended); its handle.
  caf::replies_to<start_atom, child_spec>::with<caf::actor>,
  // An actor someone else owns and handles the death of (a connection's bridge): listed as
  // `kind` with the next index of that kind, killed on request, forgotten when it exits.
  caf::reacts_to<attach_atom, std::string, caf::actor>>;

/// Starts every child in order; `limits` apply to each child separately.
[[nodiscard]] supervisor_actor spawn_supervisor(caf::actor_system& sys, std::vector<child_spec> children,
                                                restart_limits limits = {}, placement_keeper keeper = {});

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<moe::versioned_config>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::child_spec)
