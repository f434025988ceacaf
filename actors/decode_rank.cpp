// actors/decode_rank.cpp
// Continuous batching: at each step boundary the actor applies cancels, gives every running
// request room for one more token (preempting the youngest when the KV pool runs out), admits
// the hand-offs that fit, then feeds every running request's last token through one forward step
// (micro-batches balanced by context length) and samples the next tokens on the stream.
//
// NOTE: while a step is in flight the stream owns the running requests (their KV, samplers and
// last tokens); the actor defers every change to them until the step's result arrives.
#include "actors/decode_rank.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <stdexcept>

#include "actors/policy/micro_batch.hpp"
#include "actors/rank/stream.hpp"
#include "kernels/model/output_text.hpp"
#include "kernels/sampling/logprobs.hpp"

namespace moe {

struct decode_step_result {
  std::vector<uint64_t> request_ids;
  std::vector<int32_t> tokens;                        // next token of each request, same order
  std::vector<std::vector<token_logprobs>> logprobs;  // same order; empty unless it asked
  std::string error;
  bool abandoned = false;  // its group changed: the requests run the step again
};

namespace {

struct running_request {
  kv_handoff job;
  sequence_kv kv;
  int32_t last_token = 0;     // sampled, not yet fed through the model
  int64_t num_generated = 1;  // the first token came from prefill
  uint64_t admitted = 0;      // admission order here: the youngest is preempted first
};

struct decode_rank_state {
  std::unique_ptr<rank_model> model;
  std::unique_ptr<cpu_stream> stream;
  std::unique_ptr<ep_rank_core> core;
  std::map<uint64_t, running_request> running;
  std::vector<kv_handoff> joining;           // arrived during a step
  std::set<uint64_t> cancelled;              // asked during a step
  std::map<uint64_t, sequence_kv> reserved;  // pre-allocated for hand-offs not yet arrived
  std::map<uint64_t, int64_t> booked;        // the decode balancer's bookings here: id -> blocks
  caf::actor balancer;                       // told (done_atom, id) when a booked request ends
  // Requests cancelled (client gone, cancel RPC) before their hand-off arrived: the hand-off
  // comes from the prefill rank, the cancel from the session, in either order. The most recent
  // ones, oldest first; a hand-off that never comes (cancelled in prefill) ages out.
  std::set<uint64_t> ended_early;
  std::deque<uint64_t> ended_order;
  std::vector<std::vector<running_request*>> step_rows;  // per micro-batch, in logits order
  uint64_t num_admitted = 0;
  int64_t num_preemptions = 0;
  static inline const char* name = "decode_rank";

  ~decode_rank_state() {  // stop waiting for peers, drain the stream before the model goes
    if (core)
      core->stop();
    stream.reset();
  }
};

using decode_pointer = decode_rank_actor::stateful_pointer<decode_rank_state>;

void finish(decode_pointer self, uint64_t id, std::vector<int32_t> tokens, finish_reason reason,
            std::string error = {}, std::vector<token_logprobs> logprobs = {}) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end())
    return;
  caf::anon_send(it->second.job.session, token_atom::value,
                 token_chunk{id, std::move(tokens), reason, std::move(error), std::move(logprobs)});
  it->second.kv.release(st.model->cache);
  st.running.erase(it);
}

void drop_reservation(decode_rank_state& st, uint64_t id) {
  if (auto it = st.reserved.find(id); it != st.reserved.end()) {
    it->second.release(st.model->cache);
    st.reserved.erase(it);
  }
}

// Ends the cancelled requests, waiting or running, freeing their KV. Only between steps.
void apply_cancels(decode_pointer self) {
  auto& st = self->state;
  std::erase_if(st.joining, [&](const kv_handoff& job) {
    if (st.cancelled.erase(job.request_id) == 0)
      return false;
    caf::anon_send(job.session, token_atom::value, token_chunk{job.request_id, {}, finish_reason::abort, {}});
    return true;
  });
  for (uint64_t id : st.cancelled) {
    finish(self, id, {}, finish_reason::abort);
    drop_reservation(st, id);
  }
  st.cancelled.clear();
}

// Admits waiting hand-offs whose KV fits, with room for the step's token. Only between steps.
void admit_joining(decode_pointer self) {
  auto& st = self->state;
  rank_model& m = *st.model;
  std::vector<kv_handoff> still_waiting;
  for (kv_handoff& job : st.joining) {
    running_request r{
      .job = std::move(job), .kv = {}, .last_token = 0, .num_generated = 1, .admitted = st.num_admitted};
    if (auto it = st.reserved.find(r.job.request_id); it != st.reserved.end()) {
      r.kv = std::move(it->second);  // the balancer had it pre-allocated
      st.reserved.erase(it);
    }
    if (!r.kv.reserve(m.cache, r.job.pages.num_tokens + 1)) {
      if (st.running.empty())  // can never fit here
        caf::anon_send(
          r.job.session, token_atom::value,
          token_chunk{r.job.request_id, {}, finish_reason::error, "the decode rank's KV pool is too small"});
      else
        still_waiting.push_back(std::move(r.job));
      continue;
    }
    try {
      check_import(m.cache, r.kv, r.job.pages);
    } catch (const std::invalid_argument& e) {
      r.kv.release(m.cache);
      caf::anon_send(r.job.session, token_atom::value,
                     token_chunk{r.job.request_id, {}, finish_reason::error, e.what()});
      continue;
    }
    // the copy runs on the stream, before this step's first stage; the bookkeeping stays here
    r.kv.num_cached = r.job.pages.num_tokens;
    st.stream->enqueue(
      [cache = &m.cache, table = r.kv.block_table,
       pages = std::make_shared<const kv_pages>(std::move(r.job.pages)), timings = st.core->timings_ptr(),
       sent_at = r.job.sent_at_ns] {
        write_kv(*cache, table, *pages);
        if (sent_at > 0)
          timings->add_kv_transfer(static_cast<double>(wall_clock_ns() - sent_at) * 1e-9);
      },
      [](const std::string&) {});  // write_kv cannot fail
    r.job.pages = {};
    r.last_token = r.job.first_token;
    const uint64_t id = r.job.request_id;
    ++st.num_admitted;
    st.running.emplace(id, std::move(r));
    st.core->crash_at(fault_point::first_decode);
  }
  st.joining = std::move(still_waiting);
}

void admit_and_cancel(decode_pointer self) {
  apply_cancels(self);
  admit_joining(self);
}

// The youngest running request leaves to be recomputed later (vLLM's recompute preemption): its
// KV and booking go here, and its session has it placed again (prompt + tokens so far
// re-prefilled). Returns its id.
uint64_t preempt_youngest(decode_pointer self) {
  auto& st = self->state;
  const auto youngest =
    std::max_element(st.running.begin(), st.running.end(),
                     [](const auto& a, const auto& b) { return a.second.admitted < b.second.admitted; });
  const uint64_t id = youngest->first;
  caf::anon_send(youngest->second.job.session, preempt_atom::value, id);
  youngest->second.kv.release(st.model->cache);
  st.running.erase(youngest);
  if (st.booked.erase(id) > 0 && st.balancer)
    caf::anon_send(st.balancer, done_atom::value, id);
  ++st.num_preemptions;
  return id;
}

// Room for this step's token in every running request, the oldest first. When the pool runs
// out, the blocks held for hand-offs not yet here go first (they allocate on arrival), then the
// youngest running request is preempted; a request alone that cannot grow ends at length.
void grow_running(decode_pointer self) {
  auto& st = self->state;
  std::vector<std::pair<uint64_t, uint64_t>> by_age;  // (admitted, id)
  for (const auto& [id, r] : st.running)
    by_age.emplace_back(r.admitted, id);
  std::sort(by_age.begin(), by_age.end());
  for (const auto& [admitted, id] : by_age) {
    const auto it = st.running.find(id);
    if (it == st.running.end())
      continue;  // preempted for an older one
    sequence_kv& kv = it->second.kv;
    while (!kv.reserve(st.model->cache, kv.num_cached + 1)) {
      if (!st.reserved.empty()) {
        drop_reservation(st, std::prev(st.reserved.end())->first);
      } else if (st.running.size() == 1) {
        finish(self, id, {}, finish_reason::length);  // the whole pool is not enough
        break;
      } else if (preempt_youngest(self) == id) {
        break;
      }
    }
  }
}

// The next step's micro-batches: every running request's last token, micro-batches filled
// greedily to even out their cost (a token's linear work plus its core attention over its context;
// split_decode_batch in actors/policy/micro_batch.hpp).
ep_rank_core::micro_batches plan_step(decode_pointer self) {
  auto& st = self->state;
  apply_cancels(self);
  grow_running(self);  // the running requests before the ones joining
  admit_joining(self);
  const int64_t num_mb = st.core->group().num_micro_batches;
  std::vector<running_request*> rows;
  std::vector<int64_t> keys;  // each row's token attends to its context and itself
  for (auto& [id, r] : st.running) {
    rows.push_back(&r);
    keys.push_back(r.kv.num_cached + 1);
  }
  const std::vector<std::vector<size_t>> parts = split_decode_batch(keys, st.model->decode_cost, num_mb);
  ep_rank_core::micro_batches mbs(parts.size());
  st.step_rows.assign(parts.size(), {});
  for (size_t mb = 0; mb < parts.size(); ++mb)
    for (size_t i : parts[mb]) {
      running_request& r = *rows[i];
      mbs[mb].push_back({.tokens = std::span(&r.last_token, 1), .kv = &r.kv, .decode = true});
      st.step_rows[mb].push_back(&r);
    }
  return mbs;
}

// The step's logits are ready: sample on the stream, then report to the actor.
void sample_step(decode_pointer self, step_pipeline& pipeline, const std::string& error) {
  auto& st = self->state;
  auto result = std::make_shared<decode_step_result>();
  result->error = error;
  result->abandoned = st.core->step_abandoned();
  const int64_t vocab = st.model->weights->config.vocab_size;
  st.core->enqueue_sampling(
    [rows = st.step_rows, &pipeline, result, vocab] {
      for (size_t mb = 0; mb < rows.size(); ++mb)
        for (size_t i = 0; i < rows[mb].size(); ++i) {
          running_request* r = rows[mb][i];
          result->request_ids.push_back(r->job.request_id);
          if (!result->error.empty())
            continue;
          const std::span<const float> logits = std::span(pipeline.logits(static_cast<int64_t>(mb)))
                                                  .subspan(i * static_cast<size_t>(vocab),
                                                           static_cast<size_t>(vocab));
          picked_token next = pick_token(*r->job.pick, logits, r->job.spec.sampling.logprobs);
          result->tokens.push_back(next.token_id);
          result->logprobs.push_back(std::move(next.logprobs));
        }
    },
    [self = caf::actor_cast<caf::actor>(self), result](const std::string& sample_error) {
      if (result->error.empty())
        result->error = sample_error;
      caf::anon_send(self, step_atom::value, result);
    });
}

void on_step_result(decode_pointer self, decode_step_result& result) {
  auto& st = self->state;
  st.core->finish_step();
  st.step_rows.clear();
  if (result.abandoned)
    return;  // each request's last token goes through the next step again
  const model_config& cfg = st.model->weights->config;
  for (size_t i = 0; i < result.request_ids.size(); ++i) {
    const uint64_t id = result.request_ids[i];
    auto it = st.running.find(id);
    if (it == st.running.end())
      continue;
    if (!result.error.empty()) {
      finish(self, id, {}, finish_reason::error, result.error);
      continue;
    }
    running_request& r = it->second;
    const int32_t token = result.tokens[i];
    ++r.num_generated;
    const finish_reason reason = token_finish(r.job.spec.sampling, cfg.eos_token_id, token, r.num_generated,
                                              r.kv.num_cached + 1, st.model->max_context());
    if (reason != finish_reason::none) {
      finish(self, id, {token}, reason, {}, std::move(result.logprobs[i]));
      continue;
    }
    r.last_token = token;
    caf::anon_send(r.job.session, token_atom::value,
                   token_chunk{id, {token}, finish_reason::none, {}, std::move(result.logprobs[i])});
  }
}

bool has_work(const decode_rank_state& st) { return !st.running.empty() || !st.joining.empty(); }

bool is_here(const decode_rank_state& st, uint64_t id) {
  return st.running.count(id) > 0 || std::any_of(st.joining.begin(), st.joining.end(),
                                                 [id](const kv_handoff& j) { return j.request_id == id; });
}

// `id` was cancelled before its hand-off came: drop the hand-off when it does.
void ended_before_handoff(decode_rank_state& st, uint64_t id) {
  constexpr size_t max_remembered = 4096;
  if (!st.ended_early.insert(id).second)
    return;
  st.ended_order.push_back(id);
  if (st.ended_order.size() > max_remembered) {
    st.ended_early.erase(st.ended_order.front());
    st.ended_order.pop_front();
  }
}

// Request `id` is over (its session ended it, or died): its booking, reservation and KV go.
void end_request(decode_pointer self, uint64_t id) {
  auto& st = self->state;
  if (st.booked.erase(id) > 0 && st.balancer)
    caf::anon_send(st.balancer, done_atom::value, id);
  drop_reservation(st, id);  // never handed off (error, cancel)
  if (is_here(st, id)) {
    st.cancelled.insert(id);
    if (!st.core->step_in_flight()) {
      admit_and_cancel(self);
      st.core->maybe_start(has_work(st));
    }
  }
}

// A session died: what this rank holds for it goes (its client resumes the request elsewhere).
void on_session_down(decode_pointer self, const caf::actor_addr& session) {
  auto& st = self->state;
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : st.running)
    if (r.job.session.address() == session)
      ids.push_back(id);
  for (const kv_handoff& j : st.joining)
    if (j.session.address() == session)
      ids.push_back(j.request_id);
  for (const uint64_t id : ids)
    end_request(self, id);
}

decode_rank_actor::behavior_type decode_rank(decode_pointer self,
                                             std::shared_ptr<const model_weights> weights,
                                             rank_model_config cfg, ep_group group, cluster_links links) {
  auto& st = self->state;
  st.model = std::make_unique<rank_model>(std::move(weights), cfg);
  if (cfg.synchronous_stream && group.num_ranks > 1)
    throw std::logic_error("decode rank: a synchronous stream in a group of " +
                           std::to_string(group.num_ranks));
  st.stream = std::make_unique<cpu_stream>("decode", cfg.synchronous_stream,
                                           cfg.cpus.empty() ? -1 : cfg.cpus[0]);
  if (!group.placements)
    group.placements = default_placements(*st.model->weights, group.num_ranks, 0);
  st.core = std::make_unique<ep_rank_core>(
    *st.model, *st.stream, std::move(group), caf::actor_cast<caf::actor>(self), std::move(links), "decode",
    [self] { return plan_step(self); },
    [self](step_pipeline& p, const std::string& error) { sample_step(self, p, error); });
  self->set_down_handler([=](caf::down_msg& dm) { on_session_down(self, dm.source); });
  return ep_member_behavior<decode_rank_actor::behavior_type>(
    self,
    [=](submit_atom, kv_handoff& job) {
      if (self->state.ended_early.erase(job.request_id) > 0)
        return;  // its session is gone: nothing to run
      self->state.core->crash_at(fault_point::handoff);
      if (job.session)  // the prefill rank's loss no longer matters to the request
        caf::anon_send(job.session, handoff_atom::value, job.request_id);
      if (job.session)
        self->monitor(job.session);  // one already dead is reported at once
      self->state.joining.push_back(std::move(job));
      self->state.core->maybe_start(true);
    },
    [=](reserve_atom, uint64_t id, int64_t num_tokens, int64_t num_blocks) {
      auto& st = self->state;
      st.booked[id] = num_blocks;
      sequence_kv kv;
      if (kv.reserve(st.model->cache, num_tokens))  // else the hand-off reserves on arrival
        st.reserved.emplace(id, std::move(kv));
    },
    [=](done_atom, uint64_t id) { end_request(self, id); },
    [=](cancel_atom, uint64_t id) {
      auto& st = self->state;
      drop_reservation(st, id);
      if (!is_here(st, id))
        ended_before_handoff(st, id);
      st.cancelled.insert(id);
      if (!st.core->step_in_flight()) {  // apply it now
        admit_and_cancel(self);
        st.core->maybe_start(has_work(st));
      }
    },
    [=](step_atom, const std::shared_ptr<decode_step_result>& result) {
      on_step_result(self, *result);
      self->state.core->maybe_start(has_work(self->state));
    },
    [=](route_atom, caf::actor& balancer) { self->state.balancer = std::move(balancer); },
    [=](bookings_atom) {
      // the asker is the balancer from now on: an end after this answer must reach it
      self->state.balancer = caf::actor_cast<caf::actor>(self->current_sender());
      rank_bookings out;
      for (const auto& [id, blocks] : self->state.booked) {
        out.request_ids.push_back(id);
        out.num_blocks.push_back(blocks);
      }
      return out;
    },
    [=](stats_atom) {
      const auto& st = self->state;
      return rank_stats{static_cast<int64_t>(st.running.size() + st.joining.size()),
                        st.model->cache.num_blocks(),
                        st.model->cache.num_free_blocks(),
                        st.core->num_steps(),
                        st.num_preemptions,
                        static_cast<int64_t>(st.num_admitted),
                        st.core->step_in_flight(),
                        st.core->peer_wait_ms(),
                        st.core->expert_bytes(),
                        st.core->timings().part_seconds(),
                        st.core->timings().kv_transfer_counts(),
                        st.core->timings().kv_transfer_seconds()};
    });
}

}  // namespace

decode_rank_actor spawn_decode_rank(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                                    rank_model_config cfg, ep_group group, cluster_links links) {
  return sys.spawn(decode_rank, std::move(weights), cfg, std::move(group), std::move(links));
}

}  // namespace moe
