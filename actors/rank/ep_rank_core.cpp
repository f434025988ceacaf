// actors/rank/ep_rank_core.cpp
#include "actors/rank/ep_rank_core.hpp"

#include <caf/send.hpp>
#include <algorithm>
#include <stdexcept>
#include <type_traits>

namespace moe {

ep_rank_core::ep_rank_core(rank_model& model, cpu_stream& stream, ep_group group, caf::actor self,
                           cluster_links links, std::string role, plan_fn plan, done_fn done)
    : model_(model), stream_(stream), group_(std::move(group)), self_(std::move(self)),
      links_(std::move(links)), role_(std::move(role)), plan_(std::move(plan)), done_(std::move(done)),
      rope_(make_rope_tables(model.weights->config)),
      load_window_(model.weights->config.num_moe_layers(),
                   std::max<int64_t>(1, model.weights->config.n_routed_experts), group_.expert_window_steps) {
  if (group_.placements && !group_.experts)  // the experts its placement gives it, from the checkpoint
    group_.experts = hold_experts_from(*model.weights, *group_.placements, group_.rank);
  if (group_.placements)
    for (size_t l = 0; l < group_.placements->size(); ++l)
      if (!(*group_.placements)[l].slot_expert.empty())
        fault_layer_ = static_cast<int64_t>(l);
  first_placements_ = group_.placements;
  first_num_ranks_ = group_.num_ranks;
  if (group_.num_ranks == 1) {  // a group of one needs no introduction
    inbox_ = std::make_shared<ep_inbox>();
    members_ = {.peers = {self_}, .inboxes = {inbox_}, .global_ranks = {0}};
  }
}

void ep_rank_core::set_membership(ep_membership m) {
  const auto me = std::find(m.peers.begin(), m.peers.end(), self_);
  if (m.global_ranks.size() != m.peers.size() || m.inboxes.size() != m.peers.size() || me == m.peers.end())
    throw std::logic_error("ep_rank_core: a membership of " + std::to_string(m.peers.size()) +
                           " ranks without this one, or with a peer list that does not fit");
  const auto rank = static_cast<int64_t>(me - m.peers.begin());
  const auto num_ranks = static_cast<int64_t>(m.peers.size());
  if (!m.placements && first_placements_) {
    if (num_ranks != first_num_ranks_)  // survivors of a lost node: every expert, from the checkpoint
      m.placements = std::make_shared<const std::vector<layer_placement>>(
        placements_for_survivors(*first_placements_, num_ranks));
    else if (num_ranks != group_.num_ranks)  // the whole group again: the placement it began with
      m.placements = first_placements_;
  }
  if (m.placements)
    for (const layer_placement& p : *m.placements)
      if (!p.slot_expert.empty() && p.num_ranks != num_ranks)
        throw std::logic_error("ep_rank_core: a placement over " + std::to_string(p.num_ranks) +
                               " ranks for a group of " + std::to_string(num_ranks));
  if (!m.inboxes[rank])  // a group across processes: peers send to this rank by message
    m.inboxes[rank] = own_inbox_;
  open_channel(m, rank);
  m.inboxes[rank]->start_epoch(m.first_step);  // the steps of an earlier group give up
  if (inbox_ && inbox_ != m.inboxes[rank])     // there too, when the new group brings another inbox
    inbox_->start_epoch(m.first_step);
  if (pipeline_) {
    pending_members_ = std::move(m);
    return;
  }
  const bool was_held = held();
  take_membership(std::move(m));
  if (was_held)  // between two messages: the step the change held may begin
    release_hold();
}

void ep_rank_core::take_membership(ep_membership m) {
  members_ = std::move(m);
  group_.rank = std::find(members_.peers.begin(), members_.peers.end(), self_) - members_.peers.begin();
  group_.num_ranks = static_cast<int64_t>(members_.peers.size());
  inbox_ = members_.inboxes[group_.rank];
  next_step_ = std::max(next_step_, members_.first_step);
  if (members_.placements) {  // the group's committed placement, from the first step on
    if (members_.placements != group_.placements) {  // what this rank lacks from the checkpoint
      group_.experts = hold_experts(*members_.placements, group_.rank, [&](int64_t l, int32_t e) {
        std::shared_ptr<const expert_copy> c = copy_for_peer(l, e);
        return c ? c : copy_expert(model_.weights->layers.at(static_cast<size_t>(l)).moe.experts.at(e));
      });
    }
    group_.placements = members_.placements;
    placement_epoch_ = members_.placement_epoch;
  }
  staged_.clear();
  // A change planned for the membership before is abandoned. Whatever step it held is begun by
  // the caller: set_membership between two messages, or the owner after finish_step (its
  // results are not applied yet here, so no step may begin).
  if (prepared_ && prepared_->in_force)
    prepared_->in_force(false);
  prepared_.reset();
}

bool ep_rank_core::held() const noexcept {
  return prepared_ && !prepared_->switch_step && next_step_ >= prepared_->hold_from;
}

void ep_rank_core::release_hold() {
  const bool work = held_with_work_;
  held_with_work_ = false;
  maybe_start(work);
}

void ep_rank_core::check_change(const placement_change& change) const {
  if (!change.placements || change.placements->size() != model_.weights->layers.size())
    throw std::invalid_argument(
      "placement: " + std::to_string(change.placements ? change.placements->size() : 0) +
      " layers for a model of " + std::to_string(model_.weights->layers.size()));
  for (size_t l = 0; l < change.placements->size(); ++l) {
    const layer_placement& p = (*change.placements)[l];
    const bool moe = model_.weights->layers[l].is_moe;
    if (moe != !p.slot_expert.empty() || (moe && p.num_ranks != group_.num_ranks))
      throw std::invalid_argument("placement: layer " + std::to_string(l) + " does not fit a group of " +
                                  std::to_string(group_.num_ranks) + " ranks");
  }
  if (change.epoch <= placement_epoch_)
    throw std::invalid_argument("placement: epoch " + std::to_string(change.epoch) + " is not after " +
                                std::to_string(placement_epoch_));
  if (change.membership_first_step != membership_first_step())
    throw std::invalid_argument("placement: planned for another membership of the group");
  if (prepared_ && prepared_->switch_step)
    throw std::invalid_argument("placement: epoch " + std::to_string(prepared_->change.epoch) +
                                " is committed from step " + std::to_string(*prepared_->switch_step) +
                                " and this rank begins step " + std::to_string(next_step_) + " next");
}

expert_source ep_rank_core::held_or_staged() const {
  return [this](int64_t l, int32_t e) -> std::shared_ptr<const expert_copy> {
    if (std::shared_ptr<const expert_copy> c = group_.experts ? group_.experts->find(l, e) : nullptr)
      return c;
    const auto it = staged_.find({l, e});
    return it == staged_.end() ? nullptr : it->second;
  };
}

int64_t ep_rank_core::expert_bytes() const noexcept {
  int64_t n = group_.experts ? group_.experts->memory_bytes() : 0;
  for (const auto& [key, copy] : staged_)
    n += copy->memory_bytes;
  if (prepared_ && prepared_->experts)  // the copies a prepared change holds besides
    for (size_t l = 0; l < prepared_->experts->layers.size(); ++l) {
      const held_layer& next = prepared_->experts->layers[l];
      for (size_t i = 0; i < next.experts.size(); ++i)
        if (!group_.experts ||
            group_.experts->find(static_cast<int64_t>(l), next.experts[i]) != next.copies[i])
          n += next.copies[i]->memory_bytes;
    }
  return n;
}

std::vector<expert_fetch> ep_rank_core::expert_fetches(const placement_change& change) const {
  check_change(change);
  const expert_source mine = held_or_staged();
  std::vector<expert_fetch> fetches;
  for (size_t l = 0; l < change.placements->size(); ++l) {
    if ((*change.placements)[l].slot_expert.empty())
      continue;
    for (const int32_t e : experts_of_rank((*change.placements)[l], group_.rank))
      if (!mine(static_cast<int64_t>(l), e))
        fetches.push_back({.layer = static_cast<int64_t>(l), .expert = e, .holder = holder_of(l, e)});
  }
  return fetches;
}

int64_t ep_rank_core::holder_of(size_t l, int32_t e) const {
  const layer_placement& now = (*group_.placements)[l];
  std::vector<int64_t> holders;  // slots ascending: a rank's slots are together
  for (const int32_t slot : now.expert_slots.at(static_cast<size_t>(e)))
    if (now.rank_of_slot(slot) != group_.rank &&
        (holders.empty() || holders.back() != now.rank_of_slot(slot)))
      holders.push_back(now.rank_of_slot(slot));
  if (holders.empty())
    throw std::invalid_argument("placement: no peer holds expert " + std::to_string(e) + " of layer " +
                                std::to_string(l));
  // spread one rank's fetches over the holders, and the ranks' over them too
  return holders[static_cast<size_t>((group_.rank + e) % static_cast<int64_t>(holders.size()))];
}

int64_t ep_rank_core::stage_experts(
  uint64_t epoch, const std::vector<std::pair<expert_fetch, std::shared_ptr<const expert_copy>>>& copies) {
  staged_epoch_ = epoch;
  int64_t bytes = 0;
  for (const auto& [f, copy] : copies) {
    bytes += copy->wire_bytes;
    staged_[{f.layer, f.expert}] = copy;
  }
  return bytes;
}

std::shared_ptr<const expert_copy> ep_rank_core::copy_for_peer(int64_t layer, int32_t expert) const {
  if (std::shared_ptr<const expert_copy> c = held_or_staged()(layer, expert))
    return c;
  return prepared_ && prepared_->experts ? prepared_->experts->find(layer, expert) : nullptr;
}

int64_t ep_rank_core::prepare_placement(placement_change change) {
  check_change(change);
  std::shared_ptr<const held_experts> experts = hold_experts(*change.placements, group_.rank,
                                                             held_or_staged());
  staged_.clear();  // the copies live on in `experts`
  const bool was_held = held();
  prepared_ = prepared_placement{.change = std::move(change),
                                 .experts = std::move(experts),
                                 .hold_from = next_step_ + placement_hold_steps};
  if (was_held && !held())
    release_hold();
  return next_step_;
}

bool ep_rank_core::commit_placement(uint64_t epoch, int64_t switch_step, int64_t membership_first_step,
                                    std::function<void(bool)> in_force) {
  if (!prepared_ || prepared_->change.epoch != epoch || prepared_->switch_step)
    return false;
  const bool ok = membership_first_step == this->membership_first_step() && switch_step >= next_step_;
  if (ok) {
    prepared_->switch_step = switch_step;
    prepared_->in_force = std::move(in_force);
  } else {
    prepared_.reset();
  }
  release_hold();
  return ok;
}

void ep_rank_core::abort_placement(uint64_t epoch) {
  if (staged_epoch_ == epoch)
    staged_.clear();
  if (!prepared_ || prepared_->change.epoch != epoch || prepared_->switch_step)
    return;
  prepared_.reset();
  release_hold();
}

void ep_rank_core::stop() {
  if (inbox_)
    inbox_->cancel();
  close_channel();
}

void ep_rank_core::arm_fault(fault_point p) {
  if (p == fault_point::first_decode && role_ != "decode")
    throw std::invalid_argument("first_decode is a decode rank's point");
  const bool exchange = p == fault_point::dispatch || p == fault_point::combine || p == fault_point::hang;
  if (exchange && (group_.num_ranks == 1 || fault_layer_ < 0))
    throw std::invalid_argument("a " + role_ + " rank alone in its group (or without MoE layers) sends no " +
                                std::string(to_string(p)));
  armed_ = p;
}

void ep_rank_core::maybe_start(bool has_work) {
  if (pipeline_ || !inbox_)  // a step in flight, or the group not yet introduced
    return;
  if (held()) {  // a placement change is being decided: its outcome starts the step
    held_with_work_ = held_with_work_ || has_work;
    return;
  }
  // a committed placement change runs the group to its switch step even when idle (peers
  // join with empty micro-batches), so that it is in force at once and a next change can come
  const bool switch_ahead = prepared_ && prepared_->switch_step && next_step_ <= *prepared_->switch_step;
  if (has_work || switch_ahead || peer_began_ >= next_step_ || inbox_->has_step(next_step_))
    start_step();
}

void ep_rank_core::start_step() {
  const step_model m{.weights = model_.weights.get(),
                     .device = model_.device.get(),
                     .cache = &model_.cache,
                     .rope = &rope_,
                     .attention = rank_model::forms};
  if (prepared_ && prepared_->switch_step && next_step_ >= *prepared_->switch_step) {
    group_.placements = prepared_->change.placements;  // the whole group switches at this step
    group_.experts = prepared_->experts;               // and the copies it gave up are freed
    placement_epoch_ = prepared_->change.epoch;
    const std::function<void(bool)> in_force = std::move(prepared_->in_force);
    prepared_.reset();
    if (in_force)
      in_force(true);
  }
  ++num_steps_run_;
  inbox_->begin_step(next_step_);  // peers' payloads for it need not wake the owner now
  micro_batches mbs = plan_();
  own_rows_ = std::any_of(mbs.begin(), mbs.end(), [](const auto& mb) { return !mb.empty(); });
  pipeline_ = std::make_unique<step_pipeline>(next_step_++, group_, m, std::move(mbs), *this);
  pipeline_->start();
}

void ep_rank_core::finish_step() {
  pipeline_.reset();
  if (pending_members_) {
    take_membership(std::move(*pending_members_));
    pending_members_.reset();
  }
}

void ep_rank_core::on_peer_step(int64_t step) {
  peer_began_ = std::max(peer_began_, step);  // over NCCL, before any of its payloads is here
  if (step >= next_step_)
    maybe_start(false);  // a peer began a step: take part, even with nothing
}

void ep_rank_core::on_peer_payload(std::shared_ptr<const ep_dispatch> d) {
  const int64_t step = d->key.step;
  if (own_inbox_->put(std::move(d), ep_inbox::clock::now()))
    on_peer_step(step);
}

void ep_rank_core::on_peer_payload(std::shared_ptr<const ep_combine> c) {
  const int64_t step = c->key.step;
  if (own_inbox_->put(std::move(c), ep_inbox::clock::now()))
    on_peer_step(step);
}

void ep_rank_core::on_stage_done(int64_t step, int64_t /*micro_batch*/, int32_t stage,
                                 const std::string& error) {
  if (!pipeline_ || step != pipeline_->step() || static_cast<stage_kind>(stage) != stage_kind::logits)
    throw std::logic_error(role_ + " rank: a stage completion for step " + std::to_string(step) +
                           " outside it");
  pipeline_->on_logits_done();
  if (pipeline_->logits_ran() && !pipeline_->expert_tokens().empty())  // an abandoned step runs again
    load_window_.add_step(pipeline_->expert_tokens());
  done_(*pipeline_, error.empty() ? pipeline_->error() : error);
}

int64_t ep_rank_core::peer_wait_ms() const {
  if (!inbox_)
    return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(inbox_->waiting_for(ep_inbox::clock::now()))
    .count();
}

expert_load ep_rank_core::routed_load() const {
  matrix<int64_t> total = load_window_.total();
  return {.num_layers = total.rows,
          .num_experts = total.cols,
          .window_steps = load_window_.window_steps(),
          .steps_covered = load_window_.steps_covered(),
          .counts = std::move(total.data)};
}

std::function<void()> ep_rank_core::traced(std::string name, std::function<void()> work) const {
  std::shared_ptr<trace_recorder> trace = links_.trace;
  if (!trace || !trace->enabled())
    return work;
  const int64_t grank = members_.global_ranks.empty() ? group_.rank : members_.global_ranks[group_.rank];
  return [work = std::move(work), trace, grank, name = std::move(name), role = role_] {
    const auto begin = std::chrono::steady_clock::now();
    work();
    trace->add({.rank = grank,
                .lane = trace_lane::compute,
                .name = name,
                .category = role,
                .begin = begin,
                .end = std::chrono::steady_clock::now()});
  };
}

static_assert(static_cast<int>(timed_part::attn_0) == static_cast<int>(stage_kind::attn_0) &&
                static_cast<int>(timed_part::logits) == static_cast<int>(stage_kind::logits),
              "a stage's timed part is the stage itself");

void ep_rank_core::enqueue(int64_t micro_batch, stage_kind stage, int64_t layer_idx,
                           std::optional<stage_input> input, std::function<void()> work) {
  const int64_t step = next_step_ - 1;
  if (links_.trace && links_.trace->enabled())  // names only for a trace: ~80 stages a step
    work = traced(std::string(to_string(stage)) + " mb" + std::to_string(micro_batch) + " L" +
                    std::to_string(layer_idx),
                  std::move(work));
  // timed on the stream: the wait for peers' payloads apart from the stage (nor part of its span)
  work = [work = std::move(work), input, inbox = inbox_, timings = timings_,
          part = static_cast<timed_part>(stage)] {
    using clock = std::chrono::steady_clock;
    const auto ns = [](clock::duration d) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    auto begin = clock::now();
    if (input) {
      inbox->wait(*input);  // throws once the rank stops
      const auto waited = clock::now();
      timings->add(timed_part::peer_wait, ns(waited - begin));
      begin = waited;
    }
    work();
    timings->add(part, ns(clock::now() - begin));
  };
  if (stage != stage_kind::logits)  // the pipeline keeps its stages' errors; only the end is news
    return stream_.enqueue(std::move(work), nullptr);
  stream_.enqueue(std::move(work), [self = self_, step, micro_batch, stage](const std::string& error) {
    caf::anon_send(self, stage_atom::value, step, micro_batch, static_cast<int32_t>(stage), error);
  });
}

void ep_rank_core::enqueue_sampling(std::function<void()> work,
                                    std::function<void(const std::string&)> on_done) {
  work = [work = std::move(work), timings = timings_] {
    const auto begin = std::chrono::steady_clock::now();
    work();
    timings->add(
      timed_part::sample,
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin).count());
  };
  stream_.enqueue(traced("SAMPLE", std::move(work)), std::move(on_done));
}

template <class Payload>
void ep_rank_core::send_to_peer(int64_t dest_rank, std::shared_ptr<const Payload> p, size_t num_bytes,
                                const char* what) {
  const ep_key key = p->key;
  if (crashed_)
    return;  // the rank is dead to its peers
  const fault_point point = std::is_same_v<Payload, ep_dispatch> ? fault_point::dispatch
                                                                 : fault_point::combine;
  // an exchange fault fires in a step with requests of its own (they migrate), not an idle one
  const bool at_fault = key.layer_idx == fault_layer_ && own_rows_;
  if (armed_ == point && at_fault) {
    crashed_ = true;
    caf::anon_send(self_, fault_atom::value);  // before the step's LOGITS news: the rank dies first
    return;
  }
  if (armed_ == fault_point::hang && point == fault_point::dispatch && at_fault) {
    crashed_ = true;  // what follows the hang is never sent
    members_.inboxes.at(group_.rank)->hang_until_cancelled();
    return;
  }
  const auto now = link_model::clock::now();
  auto at = now;
  if (links_.links && links_.links->carries(key.step)) {
    const int64_t src_g = members_.global_ranks[group_.rank], dst_g = members_.global_ranks[dest_rank];
    at = links_.links->deliver_at(src_g, dst_g, num_bytes, now);
    if (links_.trace && links_.trace->enabled())
      links_.trace->add({.rank = src_g,
                         .lane = trace_lane::comm,
                         .name = std::string(what) + " mb" + std::to_string(key.micro_batch) + " L" +
                                 std::to_string(key.layer_idx) + " to " + std::to_string(dst_g),
                         .category = role_,
                         .begin = now,
                         .end = at});
  }
  const std::shared_ptr<ep_inbox>& dest_inbox = members_.inboxes.at(dest_rank);
  if (!dest_inbox) {  // a peer in another process: over NCCL or the data plane, or as a message
    if (send_collective(dest_rank, *p))
      return;
    const size_t at = static_cast<size_t>(dest_rank);
    if (links_.plane && at < members_.data_addresses.size() && !members_.data_addresses[at].empty())
      links_.plane->send(members_.data_addresses[at], members_.peers.at(dest_rank), *p);
    else
      caf::anon_send(members_.peers.at(dest_rank), dispatch_atom::value, *p);
    return;
  }
  if (!dest_inbox->put(std::move(p), at))
    return;
  // the peer has not begun this step: its owner starts it when the payload arrives
  const caf::actor& dest = members_.peers.at(dest_rank);
  if (at > now)
    caf::delayed_anon_send(dest, at - now, dispatch_atom::value, key.step);
  else
    caf::anon_send(dest, dispatch_atom::value, key.step);
}

void ep_rank_core::send_dispatch(int64_t dest_rank, std::shared_ptr<const ep_dispatch> d) {
  const size_t bytes = d->rows.num_bytes() + d->pair_row.size() * (2 * sizeof(int32_t) + sizeof(float));
  send_to_peer(dest_rank, std::move(d), bytes, "DISPATCH");
}

void ep_rank_core::send_combine(int64_t dest_rank, std::shared_ptr<const ep_combine> c) {
  const size_t bytes = c->outputs.num_bytes();
  send_to_peer(dest_rank, std::move(c), bytes, "COMBINE");
}

}  // namespace moe
