// actors/atoms.hpp
// The atoms that name actor messages (CAF 0.17: at most 10 characters; send `x_atom::value`).
#pragma once

#include <caf/atom.hpp>

namespace moe {

using submit_atom = caf::atom_constant<caf::atom("submit")>;  // a request enters a stage
using done_atom = caf::atom_constant<caf::atom("done")>;      // a request left a stage
using stats_atom = caf::atom_constant<caf::atom("stats")>;    // counters, please
using step_atom = caf::atom_constant<caf::atom("step")>;      // a rank's stream finished a step
using token_atom = caf::atom_constant<caf::atom("token")>;    // new output tokens for a session
using start_atom = caf::atom_constant<caf::atom("start")>;    // a request's prefill began
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;  // drop a request, free its KV
using dispatch_atom =
  caf::atom_constant<caf::atom("dispatch")>;                    // a peer began a step (its dispatch is here)
using stage_atom = caf::atom_constant<caf::atom("stage")>;      // a stream finished a step's last stage
using peers_atom = caf::atom_constant<caf::atom("peers")>;      // a rank's expert-parallel group
using pick_atom = caf::atom_constant<caf::atom("pick")>;        // a balancer, choose a rank
using reserve_atom = caf::atom_constant<caf::atom("reserve")>;  // pre-allocate a request's KV
using route_atom = caf::atom_constant<caf::atom("route")>;      // where to send something from now on
using bookings_atom = caf::atom_constant<caf::atom("bookings")>;    // the decode balancer's bookings here
using actors_atom = caf::atom_constant<caf::atom("actors")>;        // a supervisor's live children
using kill_atom = caf::atom_constant<caf::atom("kill")>;            // fault injection: crash this child
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;        // a child's current handle
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;      // place a request again (rank lost)
using resume_atom = caf::atom_constant<caf::atom("resume")>;        // go on with a request (holder lost)
using attach_atom = caf::atom_constant<caf::atom("attach")>;        // this session holds your request
using preempt_atom = caf::atom_constant<caf::atom("preempt")>;      // out of KV: recompute it later
using handoff_atom = caf::atom_constant<caf::atom("handoff")>;      // a request's KV reached its decode rank
using fault_atom = caf::atom_constant<caf::atom("fault")>;          // fault injection: crash at a point
using configure_atom = caf::atom_constant<caf::atom("configure")>;  // change (or restore) a configuration
using config_atom = caf::atom_constant<caf::atom("config")>;        // the configuration, please
using balance_atom = caf::atom_constant<caf::atom("balance")>;      // a balancer's balancedness
using expert_load_atom = caf::atom_constant<caf::atom("expertload")>;  // routed tokens per expert
using placement_atom = caf::atom_constant<caf::atom("placement")>;     // where the expert replicas are
using rebalance_atom = caf::atom_constant<caf::atom("rebalance")>;     // plan and install a placement now
using experts_atom = caf::atom_constant<caf::atom("experts")>;         // copy experts to where they will be
using watch_atom = caf::atom_constant<caf::atom("watch")>;             // quit when this actor goes down
using check_atom = caf::atom_constant<caf::atom("ebcheck")>;           // an expert balancer's periodic look
using join_atom = caf::atom_constant<caf::atom("join")>;               // a peer node asks for a node's ranks
using ended_atom = caf::atom_constant<caf::atom("ended")>;  // a request is over: free what it holds
using nccl_atom = caf::atom_constant<caf::atom("ncclid")>;  // a group's NCCL communicator id

}  // namespace moe
