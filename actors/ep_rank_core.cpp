// actors/ep_rank_core.cpp
#include "actors/ep_rank_core.hpp"

#include <caf/send.hpp>
#include <stdexcept>

namespace moe {

ep_rank_core::ep_rank_core(rank_model& model, cpu_stream& stream, ep_group group, caf::actor self,
                           cluster_links links, std::string role, plan_fn plan, done_fn done)
    : model_(model), stream_(stream), group_(std::move(group)), self_(std::move(self)), links_(std::move(links)),
      role_(std::move(role)), plan_(std::move(plan)), done_(std::move(done)),
      rope_(make_rope_tables(model.weights->config)) {
  if (group_.num_ranks == 1)                // a group of one needs no introduction
    members_ = {.peers = {self_}, .global_ranks = {0}};
}

void ep_rank_core::set_membership(ep_membership m) {
  if (static_cast<int64_t>(m.peers.size()) != group_.num_ranks || m.global_ranks.size() != m.peers.size())
    throw std::logic_error("ep_rank_core: a group of " + std::to_string(m.peers.size()) + " ranks for a rank of " +
                           std::to_string(group_.num_ranks));
  members_ = std::move(m);
}

void ep_rank_core::maybe_start(bool has_work) {
  if (pipeline_)
    return;
  bool peer_began = false;
  for (const auto& d : early_)
    peer_began = peer_began || d->key.step == next_step_;
  if (has_work || peer_began)
    start_step();
}

void ep_rank_core::start_step() {
  step_error_.clear();
  const step_model m{.weights = model_.weights.get(), .device = model_.device.get(), .cache = &model_.cache,
                     .rope = &rope_};
  pipeline_ = std::make_unique<step_pipeline>(next_step_++, group_, m, plan_(), *this);
  pipeline_->start();
  std::vector<std::shared_ptr<const ep_dispatch>> early = std::move(early_);
  early_.clear();
  for (auto& d : early)
    if (d->key.step == pipeline_->step())
      pipeline_->on_dispatch(std::move(d));
    else
      early_.push_back(std::move(d));
}

void ep_rank_core::finish_step() { pipeline_.reset(); }

void ep_rank_core::on_dispatch(std::shared_ptr<const ep_dispatch> d) {
  if (pipeline_ && d->key.step == pipeline_->step())
    return pipeline_->on_dispatch(std::move(d));
  if (d->key.step < next_step_)
    throw std::logic_error(role_ + " rank " + std::to_string(group_.rank) + ": a dispatch for past step " +
                           std::to_string(d->key.step));
  early_.push_back(std::move(d));
  maybe_start(false);                       // a peer began a step: take part, even with nothing
}

void ep_rank_core::on_combine(std::shared_ptr<const ep_combine> c) {
  if (!pipeline_ || c->key.step != pipeline_->step())
    throw std::logic_error(role_ + " rank " + std::to_string(group_.rank) + ": a combine for step " +
                           std::to_string(c->key.step) + " outside it");
  pipeline_->on_combine(std::move(c));
}

void ep_rank_core::on_stage_done(int64_t step, int64_t micro_batch, int32_t stage, const std::string& error) {
  if (!pipeline_ || step != pipeline_->step())
    throw std::logic_error(role_ + " rank: a stage completion for step " + std::to_string(step) + " outside it");
  if (!error.empty() && step_error_.empty())
    step_error_ = error;                    // the machine goes on so that peers are not left waiting
  pipeline_->on_stage_done(micro_batch, static_cast<stage_kind>(stage));
  if (pipeline_->done())
    done_(*pipeline_, step_error_);
}

void ep_rank_core::enqueue(int64_t micro_batch, stage_kind stage, int64_t layer_idx, std::function<void()> work) {
  const int64_t step = next_step_ - 1;
  std::shared_ptr<trace_recorder> trace = links_.trace;
  if (trace && trace->enabled()) {
    const int64_t grank = members_.global_ranks.empty() ? group_.rank : members_.global_ranks[group_.rank];
    work = [work = std::move(work), trace, grank, micro_batch, stage, layer_idx, role = role_] {
      const auto begin = std::chrono::steady_clock::now();
      work();
      trace->add({.rank = grank, .lane = trace_lane::compute,
                  .name = std::string(to_string(stage)) + " mb" + std::to_string(micro_batch) + " L" +
                          std::to_string(layer_idx),
                  .category = role, .begin = begin, .end = std::chrono::steady_clock::now()});
    };
  }
  stream_.enqueue(std::move(work), [self = self_, step, micro_batch, stage](const std::string& error) {
    caf::anon_send(self, stage_atom::value, step, micro_batch, static_cast<int32_t>(stage), error);
  });
}

template <class Atom, class Payload>
void ep_rank_core::send_to_peer(int64_t dest_rank, Atom atom, std::shared_ptr<const Payload> p, size_t num_bytes,
                                const char* what, const ep_key& key) {
  const caf::actor& dest = members_.peers.at(dest_rank);
  if (!links_.links)
    return caf::anon_send(dest, atom, std::move(p));
  const int64_t src_g = members_.global_ranks[group_.rank], dst_g = members_.global_ranks[dest_rank];
  const auto now = link_model::clock::now();
  const auto at = links_.links->deliver_at(src_g, dst_g, num_bytes, now);
  if (links_.trace && links_.trace->enabled())
    links_.trace->add({.rank = src_g, .lane = trace_lane::comm,
                       .name = std::string(what) + " mb" + std::to_string(key.micro_batch) + " L" +
                               std::to_string(key.layer_idx) + " to " + std::to_string(dst_g),
                       .category = role_, .begin = now, .end = at});
  caf::delayed_anon_send(dest, at - now, atom, std::move(p));
}

void ep_rank_core::send_dispatch(int64_t dest_rank, std::shared_ptr<const ep_dispatch> d) {
  const size_t bytes = d->rows.num_bytes() + d->pair_row.size() * (2 * sizeof(int32_t) + sizeof(float));
  const ep_key key = d->key;
  send_to_peer(dest_rank, dispatch_atom::value, std::move(d), bytes, "DISPATCH", key);
}

void ep_rank_core::send_combine(int64_t dest_rank, std::shared_ptr<const ep_combine> c) {
  const size_t bytes = c->outputs.num_bytes();
  const ep_key key = c->key;
  send_to_peer(dest_rank, combine_atom::value, std::move(c), bytes, "COMBINE", key);
}

}  // namespace moe
