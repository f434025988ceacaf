// actors/rank/step_pipeline.hpp
// One forward step of one rank in an expert-parallel group, as a stream program: per layer ATTN-0,
// ATTN-1 (+ gate), DISPATCH ∥ SHARED, MLP (the routed experts this rank holds, over every rank's
// dispatched tokens), COMBINE. start() enqueues the whole step at once, in DeepSeek's order, as a
// GPU stream would take it: the stages that need peers' payloads (MLP: the dispatches, COMBINE: the
// answers) wait on the stream for them in the rank's inbox, and payloads go from the sender's
// stream into the receiver's inbox. With two micro-batches one's dispatch/combine is in flight
// while the other computes. The owner hears only of LOGITS, the step's last stage.
// CAF-free: the rank actors bind pipeline_io to their stream and peers; tests bind it to a loop.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/rank/ep_inbox.hpp"
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
  /// Runs `work` (which never throws) on the stream after everything enqueued before, once
  /// `input`, when given, is in inbox(). After the LOGITS stage has run, the owner calls
  /// step_pipeline::on_logits_done().
  virtual void enqueue(int64_t micro_batch, stage_kind stage, int64_t layer_idx,
                       std::optional<stage_input> input, std::function<void()> work) = 0;
  /// Puts a payload into a peer's inbox (never this rank's: the pipeline fills its own).
  /// Called from inside enqueued work, on the stream, as soon as the payload exists: thread-safe.
  virtual void send_dispatch(int64_t dest_rank, std::shared_ptr<const ep_dispatch> d) = 0;
  virtual void send_combine(int64_t dest_rank, std::shared_ptr<const ep_combine> c) = 0;
  /// This rank's receive side.
  virtual ep_inbox& inbox() = 0;
};

/// This rank's place in its expert-parallel group.
struct ep_group {
  int64_t rank = 0;
  int64_t num_ranks = 1;
  /// Per layer (empty placement for dense layers). Shared so a new plan can replace it between steps.
  std::shared_ptr<const std::vector<layer_placement>> placements;
  /// The routed experts this rank holds under `placements`, in its own memory (hold_experts).
  std::shared_ptr<const held_experts> experts;
  ep_precision ep;                // the topology picks FP8 dispatch + BF16 combine
  int64_t num_micro_batches = 2;  // the same on every rank of the group
  /// MLP: answer peers one by one, before this rank's own tokens, from this many rows per expert
  /// slot (answer_groups; 0: always).
  int64_t answer_split_min_rows = moe::answer_split_min_rows;
  /// Routed-token counts per expert are kept over this many steps (ep_rank_core::routed_load).
  int64_t expert_window_steps = 1000;
};

/// What the pipeline computes with (the rank's, touched only from its stream).
struct step_model {
  const model_weights* weights = nullptr;
  backend* device = nullptr;
  kv_cache* cache = nullptr;
  const rope_tables* rope = nullptr;
  attention_forms attention;  // naive prefill, absorbed decode (forward.hpp)
};

class step_pipeline {
 public:
  /// `micro_batches` (exactly group.num_micro_batches of them, possibly empty) hold batch entries
  /// whose KV is reserved; the entries' sequences must not change until the step is done.
  step_pipeline(int64_t step, const ep_group& group, const step_model& model,
                std::vector<std::vector<batch_entry>> micro_batches, pipeline_io& io);

  /// Enqueues every stage of the step (see program order in step_pipeline.cpp).
  void start();
  /// The LOGITS stage has run: the step is done.
  void on_logits_done() noexcept { finished_ = true; }

  [[nodiscard]] int64_t step() const noexcept { return step_; }
  [[nodiscard]] bool done() const noexcept { return finished_; }
  /// After done(): the first error a stage met, empty if none. A stage that fails still sends
  /// (empty dispatches, zero answers), so no peer waits for it, and the step runs to its end.
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  /// After done(): the LOGITS stage ran (and advanced the sequences' KV), whatever came before.
  [[nodiscard]] bool logits_ran() const noexcept { return logits_ran_; }
  /// After done(): each micro-batch's logits [rows, vocab] (forward_step::logits order).
  [[nodiscard]] const std::vector<float>& logits(int64_t micro_batch) const {
    return mbs_[micro_batch].logits;
  }
  /// After done(): the tokens this rank's gate routed to each logical expert, per MoE layer in
  /// layer order, [num_moe_layers * n_routed_experts] (every micro-batch; a failed layer none).
  [[nodiscard]] const std::vector<int64_t>& expert_tokens() const noexcept { return expert_tokens_; }

 private:
  struct micro_batch {
    std::vector<batch_entry> entries;
    std::unique_ptr<forward_step> fwd;
    int64_t next_layer = 0;  // the first layer not yet enqueued
    dispatch_plan plan;      // this layer's exchange (written by ATTN-1, read by COMBINE)
    std::vector<float> logits;
  };

  /// io_.enqueue of `work`, which records the first error instead of throwing and is skipped once
  /// the inbox is cancelled (the rank is stopping).
  void to_stream(int64_t mb, stage_kind stage, int64_t layer_idx, std::optional<stage_input> input,
                 std::function<void()> work);
  /// Enqueues `mb`'s layers from its next one: dense layers whole, then a MoE layer's ATTN-0 and
  /// ATTN-1 (whose dispatches leave from the stream).
  void begin_layers(int64_t mb);
  void enqueue_attn_1_moe(int64_t mb, int64_t layer_idx);
  void enqueue_mlp(int64_t mb, int64_t layer_idx);
  void enqueue_combine(int64_t mb, int64_t layer_idx);
  [[nodiscard]] bool is_moe(int64_t layer_idx) const noexcept;
  [[nodiscard]] ep_key key_of(int64_t mb, int64_t layer_idx) const noexcept {
    return {.step = step_, .layer_idx = layer_idx, .micro_batch = mb};
  }

  int64_t step_;
  ep_group group_;
  step_model model_;
  pipeline_io& io_;
  std::vector<micro_batch> mbs_;
  std::vector<int64_t> moe_row_;        // per layer: its row in expert_tokens_ (-1: dense)
  std::vector<int64_t> expert_tokens_;  // written on the stream, read after done()
  std::string error_;                   // likewise
  bool logits_ran_ = false;             // likewise
  bool finished_ = false;
};

}  // namespace moe
