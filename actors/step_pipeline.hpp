// actors/step_pipeline.hpp
// One forward step of one rank in an expert-parallel group, as an event-driven machine over
// micro-batches: per layer ATTN-0, ATTN-1 (+ gate), DISPATCH ∥ SHARED, MLP (the routed experts
// this rank holds, over every rank's dispatched tokens), COMBINE. Work goes to the rank's stream
// through pipeline_io; the owner feeds back stage completions and peer messages in any order.
// With two micro-batches, one's dispatch/combine is in flight while the other computes.
// CAF-free: the rank actors bind pipeline_io to their stream and peers; tests bind it to a loop.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/model/expert_parallel.hpp"
#include "kernels/model/forward_step.hpp"

namespace moe {

enum class stage_kind : uint8_t { attn_0, attn_1, shared, mlp, combine, logits };

/// "ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS".
[[nodiscard]] std::string_view to_string(stage_kind s) noexcept;

/// How the pipeline reaches the rank's stream and its peers.
class pipeline_io {
public:
  virtual ~pipeline_io() = default;
  /// Runs `work` on the stream after everything enqueued before; when it has run, the owner calls
  /// step_pipeline::on_stage_done(micro_batch, stage) (or on_stage_failed).
  virtual void enqueue(int64_t micro_batch, stage_kind stage, int64_t layer_idx, std::function<void()> work) = 0;
  /// Sends to a peer rank of the group (never to this rank: the pipeline keeps those itself).
  /// Called from inside enqueued work, on the stream, as soon as the payload exists: thread-safe.
  virtual void send_dispatch(int64_t dest_rank, std::shared_ptr<const ep_dispatch> d) = 0;
  virtual void send_combine(int64_t dest_rank, std::shared_ptr<const ep_combine> c) = 0;
};

/// This rank's place in its expert-parallel group.
struct ep_group {
  int64_t rank = 0;
  int64_t num_ranks = 1;
  /// Per layer (empty placement for dense layers). Shared so a new plan can replace it between steps.
  std::shared_ptr<const std::vector<layer_placement>> placements;
  ep_precision ep;                          // the topology picks FP8 dispatch + BF16 combine
  int64_t num_micro_batches = 2;            // the same on every rank of the group
  /// MLP: answer peers one by one, before this rank's own tokens, from this many rows per expert
  /// slot (answer_groups; 0: always).
  int64_t answer_split_min_rows = moe::answer_split_min_rows;
};

/// What the pipeline computes with (the rank's, touched only from its stream).
struct step_model {
  const model_weights* weights = nullptr;
  backend* device = nullptr;
  kv_cache* cache = nullptr;
  const rope_tables* rope = nullptr;
  attention_form form = attention_form::absorbed;
};

class step_pipeline {
public:
  /// `micro_batches` (exactly group.num_micro_batches of them, possibly empty) hold batch entries
  /// whose KV is reserved; the entries' sequences must not change until the step is done.
  step_pipeline(int64_t step, const ep_group& group, const step_model& model,
                std::vector<std::vector<batch_entry>> micro_batches, pipeline_io& io);

  /// Enqueues the first stages. Dispatches from peers may be fed before or after.
  void start();
  void on_stage_done(int64_t micro_batch, stage_kind stage);
  void on_dispatch(std::shared_ptr<const ep_dispatch> d);
  void on_combine(std::shared_ptr<const ep_combine> c);

  [[nodiscard]] int64_t step() const noexcept { return step_; }
  [[nodiscard]] bool done() const noexcept;
  /// After done(): each micro-batch's logits [rows, vocab] (forward_step::logits order).
  [[nodiscard]] const std::vector<float>& logits(int64_t micro_batch) const { return mbs_[micro_batch].logits; }
  [[nodiscard]] int64_t num_tokens() const noexcept;

private:
  struct micro_batch {
    std::vector<batch_entry> entries;
    std::unique_ptr<forward_step> fwd;
    int64_t layer_idx = -1;                 // the layer begun last (its stages may still be queued)
    // this layer's exchange
    dispatch_plan plan;
    std::vector<std::shared_ptr<ep_dispatch>> outgoing;
    std::vector<std::shared_ptr<const ep_combine>> answers;     // by rank
    std::vector<std::shared_ptr<ep_combine>> my_answers;        // to send after MLP
    std::vector<int64_t> answer_dest;       // the rank each of my_answers goes to
    int64_t num_answers = 0;
    std::deque<std::pair<stage_kind, int64_t>> on_stream;   // its stages (and their layers) on the stream, in order
    bool shared_queued = false;             // this layer's SHARED is on the stream
    bool shared_done = false;
    int64_t layers_finished = 0;            // layers whose last stage completed
    bool layers_done = false;
    bool finished = false;
    std::vector<float> logits;
  };

  /// io_.enqueue, recording which layer the stage belongs to: a dense layer's stages may still
  /// run after the micro-batch has begun the next layer.
  void to_stream(int64_t mb, stage_kind stage, int64_t layer_idx, std::function<void()> work);
  void begin_layer(int64_t mb, int64_t layer_idx);
  /// SHARED (a dense layer: its MLP and residual add) of `mb`'s layer, once.
  void enqueue_shared(int64_t mb, int64_t layer_idx);
  void try_begin_waiting();
  void try_mlp(int64_t mb, int64_t layer_idx);
  void try_combine(int64_t mb);
  /// Queues layer layer_idx + 1 of `mb` (when there is one) as soon as the order allows.
  void begin_next(int64_t mb, int64_t layer_idx);
  /// A layer's last stage completed; after the last layer of every micro-batch, LOGITS.
  void layer_finished(int64_t mb);
  [[nodiscard]] bool is_moe(int64_t layer_idx) const noexcept;

  int64_t step_;
  ep_group group_;
  step_model model_;
  pipeline_io& io_;
  std::vector<micro_batch> mbs_;
  std::vector<int64_t> waiting_layer_;      // per micro-batch: the layer it may begin once allowed, -1: none
  /// Dispatches received per (layer, micro-batch), from every rank of the group.
  std::map<std::pair<int64_t, int64_t>, std::vector<std::shared_ptr<const ep_dispatch>>> inbox_;
};

}  // namespace moe
