// actors/rank/step_pipeline.cpp
// The per-rank stream program. Built on the owner's thread; only the lambdas handed to
// pipeline_io::enqueue touch activations and the plan, on the stream, one after another.
#include "actors/rank/step_pipeline.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace moe {

namespace {

// An answer of the right shape and no value to `d` (a failed MLP stage's).
std::shared_ptr<ep_combine> zero_answer(const ep_dispatch& d, int64_t rank, int64_t hidden) {
  const int64_t rows = d.sum == combine_sum::per_pair ? d.num_pairs() : d.rows.num_rows;
  const std::vector<float> zeros(static_cast<size_t>(rows * hidden), 0.0f);
  return std::make_shared<ep_combine>(ep_combine{
    .key = d.key, .src_rank = rank, .outputs = encode_rows(zeros.data(), rows, hidden, d.combine_type)});
}

}  // namespace

std::string_view to_string(stage_kind s) noexcept {
  switch (s) {
    case stage_kind::attn_0: return "ATTN-0";
    case stage_kind::attn_1: return "ATTN-1";
    case stage_kind::shared: return "SHARED";
    case stage_kind::mlp: return "MLP";
    case stage_kind::combine: return "COMBINE";
    case stage_kind::logits: return "LOGITS";
  }
  return "?";
}

step_pipeline::step_pipeline(int64_t step, const ep_group& group, const step_model& model,
                             std::vector<std::vector<batch_entry>> micro_batches, pipeline_io& io)
    : step_(step), group_(group), model_(model), io_(io) {
  if (static_cast<int64_t>(micro_batches.size()) != group.num_micro_batches)
    throw std::logic_error("step_pipeline: " + std::to_string(micro_batches.size()) +
                           " micro-batches, the group runs " + std::to_string(group.num_micro_batches));
  if (!group_.placements || !group_.experts || group_.experts->layers.size() != group_.placements->size())
    throw std::logic_error("step_pipeline: the group's placements and held experts do not match");
  mbs_.resize(micro_batches.size());
  for (size_t m = 0; m < mbs_.size(); ++m) {
    mbs_[m].entries = std::move(micro_batches[m]);
    mbs_[m].fwd = std::make_unique<forward_step>(*model_.weights, *model_.device, *model_.cache, *model_.rope,
                                                 mbs_[m].entries);
  }
  int64_t num_moe = 0;
  for (int64_t l = 0; l < model_.weights->config.num_hidden_layers; ++l)
    moe_row_.push_back(is_moe(l) ? num_moe++ : -1);
  expert_tokens_.assign(static_cast<size_t>(num_moe * model_.weights->config.n_routed_experts), 0);
}

bool step_pipeline::is_moe(int64_t layer_idx) const noexcept {
  return model_.weights->layers[layer_idx].is_moe;
}

// The program, for micro-batches 0..M-1 (decode and prefill alike):
//   each micro-batch's leading dense layers and its first MoE layer's ATTN-0, ATTN-1 (dispatch leaves);
//   then per MoE layer l: MLP of each (waits for the dispatches from every rank; answers leave),
//   then per micro-batch its SHARED, its COMBINE (waits for the answers) and its next layers up
//   to the next MoE layer's ATTN-1;
//   LOGITS once for every micro-batch.
// Why SHARED sits there and not beside the dispatch: docs/ARCHITECTURE.md "Where SHARED goes".
// Micro-batch m begins a layer after micro-batch m - 1 has (a prompt split between them needs the
// first part's latent KV stored before the second part attends), and micro-batch 0 reaches its
// first dispatch before micro-batch 1 computes its dense layers, which then hide that dispatch.
// Every wait is for a stage that comes earlier in every peer's program (the same program), so the
// group cannot deadlock.
void step_pipeline::start() {
  const auto M = static_cast<int64_t>(mbs_.size());
  for (int64_t m = 0; m < M; ++m)
    begin_layers(m);
  for (int64_t l = 0; l < model_.weights->config.num_hidden_layers; ++l) {
    if (!is_moe(l))
      continue;
    for (int64_t m = 0; m < M; ++m)
      enqueue_mlp(m, l);
    for (int64_t m = 0; m < M; ++m) {
      to_stream(m, stage_kind::shared, l, std::nullopt, [fwd = mbs_[m].fwd.get(), l] { fwd->shared(l); });
      enqueue_combine(m, l);
      begin_layers(m);
    }
  }
  // lm_head once for every micro-batch: on a memory-bound CPU its weights dominate a decode step
  to_stream(0, stage_kind::logits, model_.weights->config.num_hidden_layers - 1, std::nullopt, [this] {
    std::vector<forward_step*> steps;
    for (micro_batch& x : mbs_)
      steps.push_back(x.fwd.get());
    logits_ran_ = true;  // from here the sequences' KV advances
    std::vector<std::vector<float>> out = forward_step::joint_logits(steps);
    for (size_t i = 0; i < mbs_.size(); ++i)
      mbs_[i].logits = std::move(out[i]);
  });
}

void step_pipeline::to_stream(int64_t mb, stage_kind stage, int64_t layer_idx,
                              std::optional<stage_input> input, std::function<void()> work) {
  io_.enqueue(mb, stage, layer_idx, input, [this, work = std::move(work)] {
    std::string error;
    if (io_.inbox().cancelled()) {
      error = "the rank stopped";
    } else if (io_.inbox().abandoned(step_)) {  // the group changed: nothing of it is kept
      error = "the step was abandoned: a peer of the group was restarted";
    } else {
      try {
        work();
      } catch (const std::exception& e) {
        error = *e.what() ? e.what() : "unknown error";
      } catch (...) {
        error = "unknown error";
      }
    }
    if (error_.empty())
      error_ = std::move(error);
  });
}

void step_pipeline::begin_layers(int64_t mb) {
  micro_batch& m = mbs_[mb];
  forward_step* fwd = m.fwd.get();
  while (m.next_layer < model_.weights->config.num_hidden_layers) {
    const int64_t l = m.next_layer++;
    to_stream(mb, stage_kind::attn_0, l, std::nullopt, [fwd, l] { fwd->attn_0(l); });
    if (is_moe(l))
      return enqueue_attn_1_moe(mb, l);
    to_stream(mb, stage_kind::attn_1, l, std::nullopt,
              [fwd, l, forms = model_.attention] { fwd->attn_1(l, forms); });
    to_stream(mb, stage_kind::shared, l, std::nullopt, [fwd, l] {  // a dense layer: its MLP, the residual add
      fwd->shared(l);
      fwd->combine(l);
    });
  }
}

void step_pipeline::enqueue_attn_1_moe(int64_t mb, int64_t l) {
  to_stream(mb, stage_kind::attn_1, l, std::nullopt, [this, mb, l] {
    micro_batch& m = mbs_[mb];
    forward_step* fwd = m.fwd.get();
    const model_config& cfg = model_.weights->config;
    std::vector<std::shared_ptr<ep_dispatch>> outgoing;
    std::exception_ptr failed;
    try {
      fwd->attn_1(l, model_.attention);
      outgoing = make_dispatches((*group_.placements)[l], key_of(mb, l), group_.rank, fwd->moe_input(),
                                 fwd->topk_ids(), fwd->topk_weights(), fwd->num_tokens(), cfg.hidden_size,
                                 cfg.num_experts_per_tok, group_.ep, m.plan);
      const auto E = static_cast<size_t>(cfg.n_routed_experts);
      int64_t* row = expert_tokens_.data() + static_cast<size_t>(moe_row_[l]) * E;
      for (const int32_t e :
           fwd->topk_ids().first(static_cast<size_t>(fwd->num_tokens() * cfg.num_experts_per_tok)))
        if (e >= 0 && static_cast<size_t>(e) < E)
          ++row[e];
    } catch (...) {  // take part with no tokens, so no peer waits
      failed = std::current_exception();
      m.plan = {};
      outgoing = make_dispatches((*group_.placements)[l], key_of(mb, l), group_.rank, {}, {}, {}, 0,
                                 cfg.hidden_size, cfg.num_experts_per_tok, group_.ep, m.plan);
    }
    // The stream puts the payloads on the wire the moment they exist (as DeepEP's kernels do from
    // the GPU stream); this rank's own share goes straight into its inbox.
    for (int64_t r = 0; r < group_.num_ranks; ++r)
      if (r != group_.rank)
        io_.send_dispatch(r, std::move(outgoing[r]));
    io_.inbox().put(std::move(outgoing[group_.rank]), ep_inbox::clock::now());
    if (failed)
      std::rethrow_exception(failed);
  });
}

void step_pipeline::enqueue_mlp(int64_t mb, int64_t l) {
  const stage_input in{.kind = ep_payload::dispatch, .key = key_of(mb, l), .count = group_.num_ranks};
  to_stream(mb, stage_kind::mlp, l, in, [this, in, l] {
    const int64_t D = model_.weights->config.hidden_size;
    // one batch order, whatever the arrival order: by source rank
    const std::vector<std::shared_ptr<const ep_dispatch>> received = io_.inbox().take_dispatches(in.key,
                                                                                                 in.count);
    const auto answer = [&](size_t i, std::shared_ptr<const ep_combine> c) {
      if (received[i]->src_rank != group_.rank)
        io_.send_combine(received[i]->src_rank, std::move(c));  // on the wire from the stream, as dispatches
      else
        io_.inbox().put(std::move(c), ep_inbox::clock::now());
    };
    std::vector<bool> answered(received.size(), false);
    try {
      for (const std::vector<size_t>& group : answer_groups(
             received, group_.rank, (*group_.placements)[l].slots_per_rank, group_.answer_split_min_rows)) {
        std::vector<std::shared_ptr<const ep_dispatch>> part;
        part.reserve(group.size());
        for (const size_t i : group)
          part.push_back(received[i]);
        std::vector<std::shared_ptr<ep_combine>> answers =
          run_dispatched_experts(*model_.device, group_.experts->layers[l], group_.rank, part, D);
        for (size_t j = 0; j < group.size(); ++j) {
          answered[group[j]] = true;
          answer(group[j], std::move(answers[j]));
        }
      }
    } catch (...) {  // answer zeros to the rest, so no peer waits
      for (size_t i = 0; i < received.size(); ++i)
        if (!answered[i])
          answer(i, zero_answer(*received[i], group_.rank, D));
      throw;
    }
  });
}

void step_pipeline::enqueue_combine(int64_t mb, int64_t l) {
  const stage_input in{.kind = ep_payload::combine, .key = key_of(mb, l), .count = group_.num_ranks};
  to_stream(mb, stage_kind::combine, l, in, [this, in, mb, l] {
    micro_batch& m = mbs_[mb];
    const std::vector<std::shared_ptr<const ep_combine>> answers = io_.inbox().take_combines(in.key,
                                                                                             in.count);
    for (size_t r = 0; r < answers.size(); ++r)  // one answer from every rank, by rank
      if (answers[r]->src_rank != static_cast<int64_t>(r))
        throw std::logic_error("step_pipeline: two answers from rank " +
                               std::to_string(answers[r]->src_rank));
    combine_outputs(m.plan, answers, m.fwd->routed_output().data(), model_.weights->config.hidden_size);
    m.fwd->combine(l);
  });
}

}  // namespace moe
