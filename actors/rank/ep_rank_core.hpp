// actors/rank/ep_rank_core.hpp
// What prefill and decode ranks share: an expert-parallel group member that runs forward steps in
// lockstep with its peers. It binds step_pipeline to the rank's stream (a stage that needs peers'
// payloads waits for them on the stream, in the rank's inbox; LOGITS' completion comes back as a
// (stage_atom, ...) message) and to its peers (payloads go straight into their inboxes, stamped
// with the link model's arrival time when one is on), records trace spans, and starts step s + 1
// when the rank has work or a peer's dispatch for it arrives (an idle rank joins with empty
// micro-batches, as in DeepEP; the sender tells it with a (dispatch_atom, step) message).
// Lives in a rank actor's state; every method runs on that actor's thread, except the
// pipeline_io ones the step's work calls on the stream (they read only what is fixed per run).
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "actors/policy/expert_load_window.hpp"
#include "actors/policy/link_model.hpp"
#include "actors/rank/collective_channel.hpp"
#include "actors/rank/copy_engine.hpp"
#include "actors/rank/data_plane.hpp"
#include "actors/rank/ep_inbox.hpp"
#include "actors/rank/fault_point.hpp"
#include "actors/rank/rank_timings.hpp"
#include "actors/rank/rank_model.hpp"
#include "actors/rank/step_pipeline.hpp"
#include "actors/rank/stream.hpp"
#include "actors/trace_recorder.hpp"

namespace moe {

/// How a rank reaches the rest of the cluster, shared by all ranks of one run.
struct cluster_links {
  std::shared_ptr<link_model> links;      // null: messages go at once
  std::shared_ptr<trace_recorder> trace;  // null: no trace
  copy_engine_actor copies;               // null: expert moves copy on the ranks' actor threads
  std::shared_ptr<data_plane> plane;      // null: payloads to other processes go as messages
  // non-null: payloads to ranks in other processes go over it (NCCL), whatever `plane` says
  std::shared_ptr<collective_transport> collective;
};

/// A rank's group: its peers in rank order (itself included), their inboxes and global rank ids
/// (the link model's and the trace's numbering). A peer's restart makes a new membership (the new
/// peer, a fresh inbox for it) whose steps are numbered from `first_step`: every rank abandons
/// the steps it had begun below that and runs their requests again. A lost node's makes one of
/// the survivors alone (ep_rank_core::set_membership).
struct ep_membership {
  std::vector<caf::actor> peers;
  std::vector<std::shared_ptr<ep_inbox>> inboxes;  // per group rank
  std::vector<int64_t> global_ranks;               // per group rank
  // per group rank in another process: its process's data plane address (empty: send it
  // payloads as messages); empty where the group is in one process
  std::vector<std::string> data_addresses;
  int64_t first_step = 0;
  /// The group's committed expert placement (null: keep the rank's own) and its epoch: every
  /// member uses it from first_step on, whatever change was under way (it is abandoned).
  std::shared_ptr<const std::vector<layer_placement>> placements;
  uint64_t placement_epoch = 0;
};

// A change of the group's expert placement (placement_change, actors/messages.hpp) runs in two
// phases (the expert balancer runs them), after every member has copied the experts it lacks
// from peers that hold them (expert_fetches, stage_experts; steps go on meanwhile):
// prepare_placement on every member (each answers its next step and begins no step past it +
// placement_hold_steps until the outcome), then commit_placement(switch_step) on every member
// (each uses the new placement and its held experts from that step on), or abort_placement. A
// membership change under way abandons it.

/// An expert a rank lacks for a placement change, and the group rank it copies it from.
struct expert_fetch {
  int64_t layer = 0;
  int32_t expert = 0;
  int64_t holder = 0;
};

/// How many steps past its answer a prepared rank may run before the commit: ranks of a group
/// are at most a step apart, so the commit's switch step (the highest answer + this) is ahead
/// of every rank.
inline constexpr int64_t placement_hold_steps = 2;

/// How long a prepared rank waits for the outcome before it drops the change itself (the expert
/// balancer died, or its commit is lost): the group must not stall on a dead coordinator. A
/// commit that comes later is refused, and the balancer renews the group (ep_membership).
inline constexpr std::chrono::milliseconds placement_hold_timeout{5000};

class ep_rank_core final : public pipeline_io {
 public:
  using micro_batches = std::vector<std::vector<batch_entry>>;
  /// Builds the next step's micro-batches (group.num_micro_batches of them, maybe all empty).
  using plan_fn = std::function<micro_batches()>;
  /// The step finished (error empty) or one of its stages threw; pipeline holds the logits.
  using done_fn = std::function<void(step_pipeline& pipeline, const std::string& error)>;

  ep_rank_core(rank_model& model, cpu_stream& stream, ep_group group, caf::actor self, cluster_links links,
               std::string role, plan_fn plan, done_fn done);

  /// Joins the group (before any step), or a changed group: a step in flight is abandoned (its
  /// stages are skipped or give up waiting) and the new membership holds from the next step.
  /// The membership may be of fewer ranks than the group was spawned with (the survivors of a
  /// lost node, elastic EP): this rank's group rank is its place among the peers, and without a
  /// placement of its own the membership gets placements_for_survivors (every expert on the
  /// survivors, the missing ones copied from the checkpoint); the whole group again, without a
  /// placement, gets back the one it began with. Throws std::logic_error for a membership
  /// without this rank, or with a placement over another number of ranks.
  void set_membership(ep_membership m);
  [[nodiscard]] bool step_in_flight() const noexcept { return pipeline_ != nullptr; }
  /// The step in flight (done) was abandoned for a new membership before its LOGITS stage: its
  /// requests run it again, unchanged (its KV writes are overwritten; nothing advanced). A step
  /// that got as far as LOGITS had every payload of its group, and counts.
  [[nodiscard]] bool step_abandoned() const noexcept {
    return pipeline_ != nullptr && inbox_->abandoned(pipeline_->step()) && !pipeline_->logits_ran();
  }
  [[nodiscard]] int64_t num_steps() const noexcept { return next_step_; }
  /// Steps this rank began since it started (whatever the memberships' numbering).
  [[nodiscard]] int64_t num_steps_run() const noexcept { return num_steps_run_; }
  /// How long (ms) the stream has been blocked inside the step for peers' payloads; 0 if not.
  [[nodiscard]] int64_t peer_wait_ms() const;
  /// The tokens this rank's gate routed to each expert over its window of finished steps.
  [[nodiscard]] expert_load routed_load() const;
  /// Counts over the last `window_steps` steps from now on (what was counted is dropped);
  /// throws std::invalid_argument unless > 0.
  void set_load_window(int64_t window_steps) { load_window_.reset(window_steps); }
  [[nodiscard]] const ep_group& group() const noexcept { return group_; }
  [[nodiscard]] uint64_t placement_epoch() const noexcept { return placement_epoch_; }
  /// The first step of the membership in force (or coming, after the step in flight).
  [[nodiscard]] int64_t membership_first_step() const noexcept {
    return pending_members_ ? pending_members_->first_step : members_.first_step;
  }

  /// Its stream's time per stage and its KV hand-offs' latencies (shared with the stream's work).
  [[nodiscard]] rank_timings& timings() noexcept { return *timings_; }
  [[nodiscard]] std::shared_ptr<rank_timings> timings_ptr() const noexcept { return timings_; }

  /// Bytes of the routed experts this rank holds: its own copies, staged and prepared ones too.
  [[nodiscard]] int64_t expert_bytes() const noexcept;
  /// The experts `change` gives this rank that it holds no copy of (held or staged), layer by
  /// layer, each with a peer that holds it under the placement in force (spread over them).
  /// Throws std::invalid_argument as prepare_placement for a change that does not fit.
  [[nodiscard]] std::vector<expert_fetch> expert_fetches(const placement_change& change) const;
  /// Keeps copies fetched for the change of `epoch` until it holds or is aborted: bytes of them.
  int64_t stage_experts(
    uint64_t epoch, const std::vector<std::pair<expert_fetch, std::shared_ptr<const expert_copy>>>& copies);
  /// This rank's copy of an expert, for a peer that fetches it (held, staged or prepared); null.
  [[nodiscard]] std::shared_ptr<const expert_copy> copy_for_peer(int64_t layer, int32_t expert) const;
  /// Where expert moves make their bytes (null: on this rank's actor thread).
  [[nodiscard]] const copy_engine_actor& copy_engine() const noexcept { return links_.copies; }
  /// Makes expert moves' bytes on `engine` from now on (the one before went away).
  void replace_copy_engine(copy_engine_actor engine) { links_.copies = std::move(engine); }
  /// Group rank `r`'s actor.
  [[nodiscard]] const caf::actor& peer(int64_t r) const { return members_.peers.at(static_cast<size_t>(r)); }

  /// Phase one of a placement change: checks it fits the group (std::invalid_argument naming
  /// what does not), was planned for this membership and a newer epoch, and that this rank
  /// holds a copy of every expert it gives it (staged); keeps it, and answers the step this
  /// rank begins next; no step from that + placement_hold_steps begins until commit or abort.
  int64_t prepare_placement(placement_change change);
  /// Phase two: the prepared change of `epoch` holds from `switch_step` on (an idle group runs
  /// empty steps up to it); `in_force` is called with true when this rank begins that step, or
  /// with false if a membership change drops the change first. False (the change dropped,
  /// `in_force` not kept) when none of that epoch is prepared, the membership changed since, or
  /// this rank is already past switch_step.
  bool commit_placement(uint64_t epoch, int64_t switch_step, int64_t membership_first_step,
                        std::function<void(bool)> in_force);
  /// Drops the prepared change of `epoch` (if that one is prepared), and the copies staged for it.
  void abort_placement(uint64_t epoch);

  /// Starts the next step when none is in flight and `has_work` or a peer already began it.
  void maybe_start(bool has_work);
  /// Ends the step begun last (and takes on a membership that came meanwhile); call from
  /// done_fn's aftermath when the owner is ready for the next.
  void finish_step();
  /// Runs the owner's sampling of the step's logits on the stream, after the step's stages,
  /// traced as a SAMPLE span; `on_done` as cpu_stream::enqueue's.
  void enqueue_sampling(std::function<void()> work, std::function<void(const std::string&)> on_done);
  /// The rank is stopping: stages waiting for peers give up, the rest of the program is skipped.
  /// Call before the stream drains.
  void stop();
  /// Fault injection (actors/rank/fault_point.hpp). For hang, the stream blocks at the last MoE
  /// layer of a later step with requests of this rank's until stop(). For dispatch or combine,
  /// at the last MoE layer of such a step the stream sends no payload of that kind and none after, and tells
  /// the rank (fault_atom), which then crashes; the rank's own points it checks with crash_at.
  /// Throws std::invalid_argument for first_decode on a prefill rank, and for dispatch, combine
  /// or hang in a group of one (it sends nothing).
  void arm_fault(fault_point p);
  [[nodiscard]] fault_point armed_fault() const noexcept { return armed_; }
  /// Throws injected_fault when armed at `p` (on the actor's thread).
  void crash_at(fault_point p) const {
    if (armed_ == p)
      throw injected_fault(p);
  }

  // message handlers
  /// A peer began step `step` (its dispatch is in this rank's inbox).
  void on_peer_step(int64_t step);
  /// A peer in another process sent this rank a payload (by message, not into a shared inbox):
  /// into the rank's own inbox, then as on_peer_step when its step has not begun here.
  void on_peer_payload(std::shared_ptr<const ep_dispatch> d);
  void on_peer_payload(std::shared_ptr<const ep_combine> c);
  void on_stage_done(int64_t step, int64_t micro_batch, int32_t stage, const std::string& error);
  /// Group rank 0's communicator id for the membership of id.first_step (links.collective): the
  /// channel joins with it, now or when that membership arrives.
  void on_collective_id(collective_id id);
  /// What the collective channel of the membership in force moved (zeros without one).
  [[nodiscard]] collective_stats collective_moved() const;

  // pipeline_io
  void enqueue(int64_t micro_batch, stage_kind stage, int64_t layer_idx, std::optional<stage_input> input,
               std::function<void()> work) override;
  void send_dispatch(int64_t dest_rank, std::shared_ptr<const ep_dispatch> d) override;
  void send_combine(int64_t dest_rank, std::shared_ptr<const ep_combine> c) override;
  ep_inbox& inbox() override { return *inbox_; }

 private:
  template <class Payload>
  void send_to_peer(int64_t dest_rank, std::shared_ptr<const Payload> p, size_t num_bytes, const char* what);
  void start_step();
  /// Where links.collective is set and some peer is in another process: a channel for the
  /// membership `m` (this rank at `rank`); group rank 0 makes its id and tells the others.
  void open_channel(const ep_membership& m, int64_t rank);
  void close_channel();
  /// A payload for a remote peer over the channel (on the stream); false without a channel.
  template <class Payload>
  bool send_collective(int64_t dest_rank, const Payload& p);
  /// `work` recording a compute span `name` when the trace is on.
  [[nodiscard]] std::function<void()> traced(std::string name, std::function<void()> work) const;

  rank_model& model_;
  cpu_stream& stream_;
  ep_group group_;
  caf::actor self_;
  cluster_links links_;
  std::string role_;
  plan_fn plan_;
  done_fn done_;
  void take_membership(ep_membership m);
  /// Whether the next step may begin now (not held by a prepared placement change).
  [[nodiscard]] bool held() const noexcept;
  /// A held step may go now: starts it if the owner had work when it was held.
  void release_hold();

  /// Checks `change` fits the group, this membership and a newer epoch.
  void check_change(const placement_change& change) const;
  /// A peer holding expert `e` of layer `l` under the placement in force (spread over them);
  /// std::invalid_argument if none.
  [[nodiscard]] int64_t holder_of(size_t l, int32_t e) const;
  /// Where a copy of an expert for a new placement comes from: held, then staged (for use
  /// before this rank's state changes: it reads it).
  [[nodiscard]] expert_source held_or_staged() const;

  struct prepared_placement {
    placement_change change;
    std::shared_ptr<const held_experts> experts;  // what this rank holds under it
    int64_t hold_from = 0;                        // no step from here until the outcome
    std::optional<int64_t> switch_step;           // committed: the new placement from this step on
    std::function<void(bool)> in_force;           // committed: told when it holds (or is dropped)
  };
  std::optional<prepared_placement> prepared_;
  uint64_t placement_epoch_ = 0;
  // copies fetched for a coming placement (stage_experts), and the change they are for
  std::map<std::pair<int64_t, int32_t>, std::shared_ptr<const expert_copy>> staged_;
  uint64_t staged_epoch_ = 0;
  bool held_with_work_ = false;  // maybe_start was held when the owner had work

  ep_membership members_;
  std::optional<ep_membership> pending_members_;  // came while a step was in flight
  // the group as spawned: a membership of fewer ranks (survivors of a lost node) without a
  // placement gets placements_for_survivors of this one, and the whole group again gets it back
  std::shared_ptr<const std::vector<layer_placement>> first_placements_;
  int64_t first_num_ranks_ = 1;
  std::shared_ptr<ep_inbox> inbox_;  // members_.inboxes[group_.rank] (its own in a group of one)
  // where peers in other processes send to: the inbox of every membership that arrives without
  // inboxes (one across processes), kept for the rank's life so that a payload that comes before
  // the membership waits here; start_epoch abandons an earlier membership's steps
  std::shared_ptr<ep_inbox> own_inbox_ = std::make_shared<ep_inbox>();
  rope_tables rope_;
  std::unique_ptr<step_pipeline> pipeline_;
  int64_t next_step_ = 0;    // the step to begin next (== steps begun)
  int64_t peer_began_ = -1;  // the latest step a peer said it began (on_peer_step)
  int64_t num_steps_run_ = 0;
  expert_load_window load_window_;
  // fault injection: set on the actor's thread, read on the stream
  std::atomic<fault_point> armed_{fault_point::none};
  std::atomic<bool> crashed_{false};   // reached: the stream sends nothing more
  int64_t fault_layer_ = -1;           // the last MoE layer
  std::atomic<bool> own_rows_{false};  // the step in flight holds requests of this rank's
  std::shared_ptr<rank_timings> timings_ = std::make_shared<rank_timings>();
  // the collective channel of the membership in force or coming (links.collective): replaced on
  // the actor's thread, used by the stream's sends, hence the mutex
  mutable std::mutex channel_mutex_;
  std::shared_ptr<collective_channel> channel_;
  int64_t channel_first_step_ = -1;
  std::vector<caf::actor> channel_peers_;  // likewise
  std::optional<collective_id> early_id_;  // an id that came before its membership
  int64_t announced_step_ = -1;            // on the stream: the last step told to remote peers
};

}  // namespace moe
