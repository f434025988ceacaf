// actors/step_pipeline.cpp
// The per-rank layer machine. Bookkeeping runs on the owner's thread; only the lambdas handed to
// pipeline_io::enqueue touch activations, on the stream, one after another.
#include "actors/step_pipeline.hpp"

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
  return std::make_shared<ep_combine>(
      ep_combine{.key = d.key, .src_rank = rank, .outputs = encode_rows(zeros.data(), rows, hidden, d.combine_type)});
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
    throw std::logic_error("step_pipeline: " + std::to_string(micro_batches.size()) + " micro-batches, the group runs " +
                           std::to_string(group.num_micro_batches));
  mbs_.resize(micro_batches.size());
  waiting_layer_.assign(micro_batches.size(), -1);
  for (size_t m = 0; m < mbs_.size(); ++m) {
    mbs_[m].entries = std::move(micro_batches[m]);
    mbs_[m].fwd = std::make_unique<forward_step>(*model_.weights, *model_.device, *model_.cache, *model_.rope,
                                                 mbs_[m].entries);
    mbs_[m].answers.resize(static_cast<size_t>(group_.num_ranks));
  }
}

bool step_pipeline::is_moe(int64_t layer_idx) const noexcept { return model_.weights->layers[layer_idx].is_moe; }

bool step_pipeline::done() const noexcept {
  return std::all_of(mbs_.begin(), mbs_.end(), [](const micro_batch& m) { return m.finished; });
}

int64_t step_pipeline::num_tokens() const noexcept {
  int64_t n = 0;
  for (const micro_batch& m : mbs_)
    n += m.fwd->num_tokens();
  return n;
}

void step_pipeline::start() {
  for (size_t m = 0; m < mbs_.size(); ++m)
    waiting_layer_[m] = 0;
  try_begin_waiting();
}

// A micro-batch begins layer l only after the one before it has: a prompt split between them
// needs the first part's latent KV of layer l stored before the second part attends.
void step_pipeline::try_begin_waiting() {
  for (size_t m = 0; m < mbs_.size(); ++m) {
    const int64_t l = waiting_layer_[m];
    if (l < 0 || (m > 0 && mbs_[m - 1].layer_idx < l))
      continue;
    waiting_layer_[m] = -1;
    begin_layer(static_cast<int64_t>(m), l);
  }
}

void step_pipeline::begin_layer(int64_t mb, int64_t l) {
  micro_batch& m = mbs_[mb];
  m.layer_idx = l;
  m.shared_queued = false;
  forward_step* fwd = m.fwd.get();
  to_stream(mb, stage_kind::attn_0, l, [fwd, l] { fwd->attn_0(l); });
  if (!is_moe(l)) {
    to_stream(mb, stage_kind::attn_1, l, [fwd, l, form = model_.form] { fwd->attn_1(l, form); });
    enqueue_shared(mb, l);                  // no exchange to wait for: straight behind
    // and the next layer straight behind that: micro-batch 0 reaches its first MoE layer's
    // dispatch before micro-batch 1 computes its dense layers, which then hide that dispatch
    begin_next(mb, l);
    return;
  }
  to_stream(mb, stage_kind::attn_1, l, [this, &m, fwd, l, mb] {
    const model_config& cfg = model_.weights->config;
    const ep_key key{.step = step_, .layer_idx = l, .micro_batch = mb};
    std::exception_ptr failed;
    try {
      fwd->attn_1(l, model_.form);
      m.outgoing = make_dispatches((*group_.placements)[l], key, group_.rank, fwd->moe_input(), fwd->topk_ids(),
                                   fwd->topk_weights(), fwd->num_tokens(), cfg.hidden_size, cfg.num_experts_per_tok,
                                   group_.ep, m.plan);
    } catch (...) {                         // take part with no tokens, so no peer waits; the owner reports it
      failed = std::current_exception();
      m.plan = {};
      m.outgoing = make_dispatches((*group_.placements)[l], key, group_.rank, {}, {}, {}, 0, cfg.hidden_size,
                                   cfg.num_experts_per_tok, group_.ep, m.plan);
    }
    // The stream puts the payloads on the wire the moment they exist (as DeepEP's kernels do from
    // the GPU stream), not after a round trip through the owner; this rank's own share waits for it.
    for (int64_t r = 0; r < group_.num_ranks; ++r)
      if (r != group_.rank)
        io_.send_dispatch(r, std::move(m.outgoing[r]));
    if (failed)
      std::rethrow_exception(failed);
  });
  // SHARED runs while the dispatch flies. With later micro-batches to compute it waits for this
  // ATTN-1's completion (theirs come first: they put their dispatches on the wire sooner); with
  // none (small batches: one micro-batch holds every token) it goes straight behind, so the
  // stream does not idle for a round trip through the owner.
  if (std::all_of(mbs_.begin() + mb + 1, mbs_.end(), [](const micro_batch& x) { return x.fwd->num_tokens() == 0; }))
    enqueue_shared(mb, l);
}

void step_pipeline::enqueue_shared(int64_t mb, int64_t l) {
  micro_batch& m = mbs_[mb];
  if (m.shared_queued)
    return;
  m.shared_queued = true;
  forward_step* fwd = m.fwd.get();
  if (!is_moe(l))                           // a dense layer: its MLP, then the residual add
    to_stream(mb, stage_kind::shared, l, [fwd, l] {
      fwd->shared(l);
      fwd->combine(l);
    });
  else
    to_stream(mb, stage_kind::shared, l, [fwd, l] { fwd->shared(l); });
}

void step_pipeline::to_stream(int64_t mb, stage_kind stage, int64_t layer_idx, std::function<void()> work) {
  mbs_[mb].on_stream.emplace_back(stage, layer_idx);
  io_.enqueue(mb, stage, layer_idx, std::move(work));
}

void step_pipeline::on_stage_done(int64_t mb, stage_kind stage) {
  micro_batch& m = mbs_[mb];
  // the stream runs a micro-batch's stages in order: this is the oldest one still on it
  if (m.on_stream.empty() || m.on_stream.front().first != stage)
    throw std::logic_error("step_pipeline: micro-batch " + std::to_string(mb) + " completed " +
                           std::string(to_string(stage)) + ", which is not the next stage on its stream");
  const int64_t l = m.on_stream.front().second;
  m.on_stream.pop_front();
  switch (stage) {
    case stage_kind::attn_0:
      return;
    case stage_kind::attn_1:
      if (!is_moe(l))                       // SHARED is queued (begin_layer)
        return;
      {
        // The peers' shares left from the stream (begin_layer), even when ATTN-1 failed.
        std::vector<std::shared_ptr<ep_dispatch>> outgoing = std::move(m.outgoing);
        enqueue_shared(mb, l);              // while the dispatch flies, unless queued already
        on_dispatch(std::move(outgoing[group_.rank]));
      }
      return;
    case stage_kind::shared:
      if (!is_moe(l))                       // the dense layer is done (the next one began with it)
        return layer_finished(mb);
      m.shared_done = true;
      return try_combine(mb);
    case stage_kind::mlp: {
      // The peers' answers left from the stream (try_mlp); this rank's own is still here.
      std::vector<std::shared_ptr<ep_combine>> mine = std::move(m.my_answers);
      for (size_t i = 0; i < mine.size(); ++i)
        if (m.answer_dest[i] == group_.rank && mine[i])
          on_combine(std::move(mine[i]));
      return;
    }
    case stage_kind::combine:               // the next layer is already queued (try_combine)
      return layer_finished(mb);
    case stage_kind::logits:                // one stage for all micro-batches
      for (micro_batch& each : mbs_)
        each.finished = true;
      return;
  }
}

void step_pipeline::on_dispatch(std::shared_ptr<const ep_dispatch> d) {
  if (d->key.step != step_ || d->key.micro_batch < 0 || d->key.micro_batch >= group_.num_micro_batches)
    throw std::logic_error("step_pipeline: a dispatch for step " + std::to_string(d->key.step) + " micro-batch " +
                           std::to_string(d->key.micro_batch) + " reached step " + std::to_string(step_));
  const int64_t mb = d->key.micro_batch, l = d->key.layer_idx;
  inbox_[{l, mb}].push_back(std::move(d));
  try_mlp(mb, l);
}

void step_pipeline::try_mlp(int64_t mb, int64_t l) {
  auto it = inbox_.find({l, mb});
  if (it == inbox_.end() || static_cast<int64_t>(it->second.size()) < group_.num_ranks)
    return;
  std::vector<std::shared_ptr<const ep_dispatch>> received = std::move(it->second);
  inbox_.erase(it);
  std::sort(received.begin(), received.end(),               // one batch order, whatever the arrival order
            [](const auto& a, const auto& b) { return a->src_rank < b->src_rank; });
  micro_batch& m = mbs_[mb];
  m.answer_dest.clear();
  for (const auto& d : received)
    m.answer_dest.push_back(d->src_rank);
  std::vector<std::vector<size_t>> groups =
      answer_groups(received, group_.rank, (*group_.placements)[l].slots_per_rank, group_.answer_split_min_rows);
  to_stream(mb, stage_kind::mlp, l, [this, &m, l, received = std::move(received), groups = std::move(groups)] {
    const int64_t D = model_.weights->config.hidden_size;
    m.my_answers.assign(received.size(), nullptr);
    std::vector<bool> answered(received.size(), false);
    std::exception_ptr failed;
    try {
      for (const std::vector<size_t>& group : groups) {
        std::vector<std::shared_ptr<const ep_dispatch>> part;
        for (const size_t i : group)
          part.push_back(received[i]);
        std::vector<std::shared_ptr<ep_combine>> answers = run_dispatched_experts(
            *model_.device, model_.weights->layers[l].moe, (*group_.placements)[l], group_.rank, part, D);
        for (size_t j = 0; j < group.size(); ++j) {           // on the wire from the stream, as dispatches
          const size_t i = group[j];
          answered[i] = true;
          if (m.answer_dest[i] != group_.rank)
            io_.send_combine(m.answer_dest[i], std::move(answers[j]));
          else
            m.my_answers[i] = std::move(answers[j]);
        }
      }
    } catch (...) {                         // answer zeros to the rest, so no peer waits; the owner reports it
      failed = std::current_exception();
      for (size_t i = 0; i < received.size(); ++i) {
        if (answered[i])
          continue;
        std::shared_ptr<ep_combine> zero = zero_answer(*received[i], group_.rank, D);
        if (m.answer_dest[i] != group_.rank)
          io_.send_combine(m.answer_dest[i], std::move(zero));
        else
          m.my_answers[i] = std::move(zero);
      }
    }
    if (failed)
      std::rethrow_exception(failed);
  });
}

void step_pipeline::on_combine(std::shared_ptr<const ep_combine> c) {
  if (c->key.step != step_ || c->key.micro_batch < 0 || c->key.micro_batch >= group_.num_micro_batches ||
      c->key.layer_idx != mbs_[c->key.micro_batch].layer_idx)
    throw std::logic_error("step_pipeline: a combine for step " + std::to_string(c->key.step) + " layer " +
                           std::to_string(c->key.layer_idx) + " arrived out of turn");
  const int64_t mb = c->key.micro_batch, src = c->src_rank;
  micro_batch& m = mbs_[mb];
  m.answers[src] = std::move(c);
  ++m.num_answers;
  try_combine(mb);
}

void step_pipeline::try_combine(int64_t mb) {
  micro_batch& m = mbs_[mb];
  if (!m.shared_done || m.num_answers < group_.num_ranks)
    return;
  m.shared_done = false;
  m.num_answers = 0;
  const int64_t l = m.layer_idx;
  to_stream(mb, stage_kind::combine, l,
              [fwd = m.fwd.get(), plan = std::move(m.plan), answers = std::exchange(m.answers, std::vector<std::shared_ptr<const ep_combine>>(group_.num_ranks)),
               l, D = model_.weights->config.hidden_size] {
                combine_outputs(plan, answers, fwd->routed_output().data(), D);
                fwd->combine(l);
              });
  // The next layer goes on the stream behind this COMBINE now, not after a round trip through the
  // owner when it completes: the stream runs them in order, and never waits for the owner between.
  begin_next(mb, l);
}

void step_pipeline::begin_next(int64_t mb, int64_t layer_idx) {
  if (layer_idx + 1 >= model_.weights->config.num_hidden_layers)
    return;
  waiting_layer_[mb] = layer_idx + 1;
  try_begin_waiting();
}

void step_pipeline::layer_finished(int64_t mb) {
  micro_batch& m = mbs_[mb];
  if (++m.layers_finished < model_.weights->config.num_hidden_layers)
    return;
  m.layers_done = true;
  if (!std::all_of(mbs_.begin(), mbs_.end(), [](const micro_batch& x) { return x.layers_done; }))
    return;
  // lm_head once for every micro-batch: on a memory-bound CPU its weights dominate a decode step
  to_stream(0, stage_kind::logits, m.layer_idx, [this] {
    std::vector<forward_step*> steps;
    for (micro_batch& x : mbs_)
      steps.push_back(x.fwd.get());
    std::vector<std::vector<float>> out = forward_step::joint_logits(steps);
    for (size_t i = 0; i < mbs_.size(); ++i)
      mbs_[i].logits = std::move(out[i]);
  });
}

}  // namespace moe
