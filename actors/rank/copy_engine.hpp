// actors/rank/copy_engine.hpp
// The cluster's copy engine: a thread of its own, at the lowest CPU priority, that makes the
// bytes of expert moves (a holder's encode_expert for a peer, the receiver's decode_expert into
// its own memory), as a GPU's copy engines move bytes beside its compute. On a CPU the ranks'
// streams and the actors that drive their steps share the cores with these copies: at the
// lowest priority the copies take the cycles the steps leave, so serving goes on at nearly its
// pace while experts move (tools/bench_eplb.cpp measures it). It holds no state: a rank that
// finds it gone spawns one of its own (renew_copy_engine, actors/rank/expert_fetch.hpp).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <memory>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "kernels/model/held_experts.hpp"

namespace moe {

using copy_engine_actor = caf::typed_actor<
  // (copy, layer, expert) -> its bytes for a peer
  caf::replies_to<experts_atom, std::shared_ptr<const expert_copy>, int64_t, int32_t>::with<expert_blob>,
  // bytes from a peer -> the expert in memory of its own, or invalid naming what is wrong
  caf::replies_to<experts_atom, expert_blob>::with<std::shared_ptr<const expert_copy>>,
  // quit when this actor (the cluster's supervisor) goes down
  caf::reacts_to<watch_atom, caf::actor>>;

/// Spawns the engine on a thread of its own, or, with `own_thread` false, on the scheduler like
/// any actor: a cluster whose streams run inline (cluster_config::synchronous_streams) runs on
/// CAF's deterministic scheduler, whose clock only its one thread may touch.
[[nodiscard]] copy_engine_actor spawn_copy_engine(caf::actor_system& sys, bool own_thread = true);

/// A new engine for `owner` alone (a rank whose engine went away), quitting when it does.
[[nodiscard]] copy_engine_actor spawn_copy_engine_for(caf::actor_system& sys, const caf::actor& owner);

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const moe::expert_copy>)
