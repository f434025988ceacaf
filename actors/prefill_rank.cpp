// actors/prefill_rank.cpp
// Chunked prefill in steps ("segmented attention"): the actor plans which prompt segments go into
// the next step and into which micro-batch (actors/policy/micro_batch.hpp); the stream computes
// and samples; the actor sends first tokens to sessions and KV hand-offs to decode ranks.
#include "actors/prefill_rank.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <chrono>
#include <list>
#include <set>
#include <span>
#include <stdexcept>
#include <string>

#include "actors/policy/micro_batch.hpp"
#include "actors/rank/stream.hpp"
#include "kernels/model/output_text.hpp"
#include "kernels/sampling/logprobs.hpp"

namespace moe {

namespace {

struct prefill_task {
  prefill_job job;
  sequence_kv kv;           // the whole prompt, reserved before its first segment
  int64_t num_planned = 0;  // prompt tokens given to steps so far
  bool cancelled = false;   // dropped when the step holding it ends
};

}  // namespace

struct prefill_step_result {
  struct outcome {
    prefill_task* task = nullptr;
    int32_t first_token = 0;
    std::vector<token_logprobs> logprobs;  // the first token's, when the request asked
    finish_reason reason = finish_reason::none;
    kv_pages pages;
    std::shared_ptr<sampler> pick;
  };
  std::vector<outcome> finished;  // prompts whose last segment was in the step
  std::string error;
  bool abandoned = false;  // its group changed: its segments are planned again
};

namespace {

struct prefill_rank_state {
  std::unique_ptr<rank_model> model;
  std::unique_ptr<cpu_stream> stream;
  std::unique_ptr<ep_rank_core> core;
  std::list<prefill_task> tasks;                      // FIFO; stable addresses
  int64_t num_taken = 0;                              // prompts taken so far
  std::vector<prefill_task*> step_tasks;              // in the step in flight
  std::vector<int64_t> step_starts;                   // each one's segment start (num_planned before)
  std::vector<std::vector<prefill_task*>> step_rows;  // per micro-batch: whose logits row, in order
  static inline const char* name = "prefill_rank";

  ~prefill_rank_state() {  // stop waiting for peers, drain the stream before the model goes
    if (core)
      core->stop();
    stream.reset();
  }
};

using prefill_pointer = prefill_rank_actor::stateful_pointer<prefill_rank_state>;

// The prefill balancer's accounting: this prompt no longer loads the rank.
void prefill_over(const prefill_job& job) {
  if (job.balancer)
    caf::anon_send(job.balancer, done_atom::value, job.request_id);
}

void fail(prefill_pointer self, prefill_task& t, const std::string& error) {
  caf::anon_send(t.job.session, token_atom::value,
                 token_chunk{t.job.request_id, {}, finish_reason::error, error});
  t.kv.release(self->state.model->cache);
  prefill_over(t.job);
}

void erase_tasks(prefill_rank_state& st, const std::set<const prefill_task*>& gone) {
  st.tasks.remove_if([&](const prefill_task& t) { return gone.count(&t) > 0; });
}

ep_rank_core::micro_batches plan_step(prefill_pointer self) {
  auto& st = self->state;
  rank_model& m = *st.model;
  st.step_tasks.clear();
  st.step_starts.clear();
  std::vector<prefill_segment> segments;
  std::set<const prefill_task*> never_fit;
  int64_t budget = m.config.max_prefill_tokens;
  for (prefill_task& t : st.tasks) {
    const int64_t n = static_cast<int64_t>(t.job.spec.prompt_ids.size());
    if (budget <= 0)
      break;
    if (t.kv.block_table.empty() && !t.kv.reserve(m.cache, n)) {
      if (st.step_tasks.empty() && m.cache.num_free_blocks() == m.cache.num_blocks()) {
        fail(self, t,
             "the prefill rank's KV pool is too small for a prompt of " + std::to_string(n) + " tokens");
        never_fit.insert(&t);
        continue;
      }
      break;  // wait for KV in FIFO order
    }
    const int64_t num = std::min({m.config.chunk_size, n - t.num_planned, budget});
    if (t.num_planned == 0)  // its queueing ends here
      caf::anon_send(t.job.session, start_atom::value,
                     wall_clock_ns());  // the session may be in another process
    segments.push_back(
      {.request_idx = static_cast<int64_t>(st.step_tasks.size()), .start = t.num_planned, .num_tokens = num});
    st.step_tasks.push_back(&t);
    st.step_starts.push_back(t.num_planned);
    t.num_planned += num;
    budget -= num;
  }
  erase_tasks(st, never_fit);
  const int64_t num_mb = st.core->group().num_micro_batches;
  std::vector<std::vector<prefill_segment>> parts;
  if (num_mb == 2) {
    auto two = split_micro_batches(segments, m.prefill_cost, prefill_first_share);
    parts = {std::move(two[0]), std::move(two[1])};
  } else {
    parts.resize(static_cast<size_t>(num_mb));
    parts[0] = std::move(segments);
  }
  ep_rank_core::micro_batches mbs(parts.size());
  st.step_rows.assign(parts.size(), {});
  for (size_t mb = 0; mb < parts.size(); ++mb)
    for (const prefill_segment& s : parts[mb]) {
      prefill_task* t = st.step_tasks[s.request_idx];
      const std::span<const int32_t> prompt = t->job.spec.prompt_ids;
      const int64_t n = static_cast<int64_t>(prompt.size());
      const bool last = s.start + s.num_tokens == n;
      // tokens an earlier placement generated run in the decode form, as their decode steps did
      const int64_t generated_from = std::clamp(n - t->job.spec.num_generated, s.start,
                                                s.start + s.num_tokens);
      if (generated_from > s.start)
        mbs[mb].push_back({.tokens = prompt.subspan(s.start, generated_from - s.start),
                           .kv = &t->kv,
                           .no_logits = !last || generated_from < s.start + s.num_tokens,
                           .start = s.start});
      if (generated_from < s.start + s.num_tokens)
        mbs[mb].push_back({.tokens = prompt.subspan(generated_from, s.start + s.num_tokens - generated_from),
                           .kv = &t->kv,
                           .no_logits = !last,
                           .start = generated_from,
                           .decode = true});
      if (last)
        st.step_rows[mb].push_back(t);
    }
  return mbs;
}

// The step's logits are ready: first tokens and KV export on the stream, then report.
void sample_step(prefill_pointer self, step_pipeline& pipeline, const std::string& error) {
  auto& st = self->state;
  auto result = std::make_shared<prefill_step_result>();
  result->error = error;
  result->abandoned = st.core->step_abandoned();
  rank_model* m = st.model.get();
  st.core->enqueue_sampling(
    [rows = st.step_rows, &pipeline, result, m] {
      if (!result->error.empty())
        return;
      const int64_t vocab = m->weights->config.vocab_size;
      for (size_t mb = 0; mb < rows.size(); ++mb)
        for (size_t i = 0; i < rows[mb].size(); ++i) {
          prefill_task* t = rows[mb][i];
          const auto& prompt = t->job.spec.prompt_ids;
          const int64_t n = static_cast<int64_t>(prompt.size());
          const std::span<const float> logits = std::span(pipeline.logits(static_cast<int64_t>(mb)))
                                                  .subspan(i * static_cast<size_t>(vocab),
                                                           static_cast<size_t>(vocab));
          // tokens an earlier placement generated are output, not prompt, to the sampler
          const auto num_generated = static_cast<std::ptrdiff_t>(t->job.spec.num_generated);
          auto pick = std::make_shared<sampler>(
            t->job.spec.sampling, std::vector<int32_t>(prompt.begin(), prompt.end() - num_generated));
          pick->resume_after(std::span(prompt).last(static_cast<size_t>(num_generated)));
          picked_token next = pick_token(*pick, logits, t->job.spec.sampling.logprobs);
          const int32_t first = next.token_id;
          prefill_step_result::outcome o{.task = t,
                                         .first_token = first,
                                         .logprobs = std::move(next.logprobs),
                                         .reason = token_finish(t->job.spec.sampling,
                                                                m->weights->config.eos_token_id, first, 1,
                                                                n + 1, m->max_context()),
                                         .pages = {},
                                         .pick = std::move(pick)};
          if (o.reason == finish_reason::none)  // decoding goes on elsewhere
            o.pages = export_kv(m->cache, t->kv, n);
          result->finished.push_back(std::move(o));
        }
    },
    [self = caf::actor_cast<caf::actor>(self), result](const std::string& sample_error) {
      if (result->error.empty())
        result->error = sample_error;
      caf::anon_send(self, step_atom::value, result);
    });
}

void on_step_result(prefill_pointer self, prefill_step_result& result) {
  auto& st = self->state;
  st.core->finish_step();
  std::set<const prefill_task*> gone;
  if (result.abandoned) {  // its segments go into a step again; nothing of them was kept
    for (size_t i = 0; i < st.step_tasks.size(); ++i)
      st.step_tasks[i]->num_planned = st.step_starts[i];
    result.error.clear();
    result.finished.clear();
  }
  if (!result.error.empty()) {
    for (prefill_task* t : st.step_tasks) {
      fail(self, *t, result.error);
      gone.insert(t);
    }
  }
  for (prefill_task* t : st.step_tasks)
    if (t->cancelled && !gone.count(t)) {
      t->kv.release(st.model->cache);
      prefill_over(t->job);
      gone.insert(t);
    }
  for (auto& o : result.finished) {
    if (!result.error.empty())
      break;
    if (o.task->cancelled)
      continue;
    prefill_job& job = o.task->job;
    caf::anon_send(job.session, token_atom::value,
                   token_chunk{job.request_id, {o.first_token}, o.reason, {}, std::move(o.logprobs)});
    if (o.reason == finish_reason::none)  // the session has the first token; the KV would go with the rank
      st.core->crash_at(fault_point::handoff);
    if (o.reason == finish_reason::none)
      caf::anon_send(job.decode_rank, submit_atom::value,
                     kv_handoff{job.request_id, std::move(job.spec), std::move(o.pages), o.first_token,
                                std::move(o.pick), job.session, wall_clock_ns()});
    o.task->kv.release(st.model->cache);
    prefill_over(job);
    gone.insert(o.task);
  }
  st.step_tasks.clear();
  st.step_starts.clear();
  st.step_rows.clear();
  erase_tasks(st, gone);
}

// Drops request `id`'s prompt (its KV at once, or when the step using it ends); true if it was here.
bool drop_task(prefill_pointer self, uint64_t id) {
  auto& st = self->state;
  for (auto it = st.tasks.begin(); it != st.tasks.end(); ++it) {
    if (it->job.request_id != id)
      continue;
    if (std::find(st.step_tasks.begin(), st.step_tasks.end(), &*it) != st.step_tasks.end()) {
      it->cancelled = true;  // the step in flight still uses its KV
    } else {
      it->kv.release(st.model->cache);
      prefill_over(it->job);
      st.tasks.erase(it);
    }
    return true;
  }
  return false;
}

// A session died: its prompts go, and their decode ranks drop what they booked for them.
void on_session_down(prefill_pointer self, const caf::actor_addr& session) {
  std::vector<std::pair<uint64_t, caf::actor>> gone;
  for (const prefill_task& t : self->state.tasks)
    if (t.job.session.address() == session && !t.cancelled)
      gone.emplace_back(t.job.request_id, t.job.decode_rank);
  for (const auto& [id, decode] : gone) {
    drop_task(self, id);
    if (decode)
      caf::anon_send(decode, done_atom::value, id);
  }
}

prefill_rank_actor::behavior_type prefill_rank(prefill_pointer self,
                                               std::shared_ptr<const model_weights> weights,
                                               rank_model_config cfg, ep_group group, cluster_links links) {
  auto& st = self->state;
  st.model = std::make_unique<rank_model>(std::move(weights), cfg);
  if (cfg.synchronous_stream && group.num_ranks > 1)
    throw std::logic_error("prefill rank: a synchronous stream in a group of " +
                           std::to_string(group.num_ranks));
  st.stream = std::make_unique<cpu_stream>("prefill", cfg.synchronous_stream,
                                           cfg.cpus.empty() ? -1 : cfg.cpus[0]);
  if (!group.placements)
    group.placements = default_placements(*st.model->weights, group.num_ranks, 0);
  st.core = std::make_unique<ep_rank_core>(
    *st.model, *st.stream, std::move(group), caf::actor_cast<caf::actor>(self), std::move(links), "prefill",
    [self] { return plan_step(self); },
    [self](step_pipeline& p, const std::string& error) { sample_step(self, p, error); });
  self->set_down_handler([=](caf::down_msg& dm) { on_session_down(self, dm.source); });
  return ep_member_behavior<prefill_rank_actor::behavior_type>(
    self,
    [=](submit_atom, prefill_job& job) {
      auto& st = self->state;
      const int64_t n = static_cast<int64_t>(job.spec.prompt_ids.size());
      std::string error;
      const int64_t vocab = st.model->weights->config.vocab_size;
      if (n == 0 || n >= st.model->max_context())
        error = "the prompt has " + std::to_string(n) + " tokens; this rank takes 1 to " +
                std::to_string(st.model->max_context() - 1);
      for (const int32_t id : job.spec.prompt_ids)
        if (error.empty() && (id < 0 || id >= vocab))
          error = "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")";
      if (!error.empty()) {
        caf::anon_send(job.session, token_atom::value,
                       token_chunk{job.request_id, {}, finish_reason::error, error});
        prefill_over(job);
        return;
      }
      if (job.session)
        self->monitor(job.session);  // one already dead is reported at once
      st.tasks.push_back({.job = std::move(job), .kv = {}, .num_planned = 0});
      ++st.num_taken;
      st.core->maybe_start(true);
    },
    [=](cancel_atom, uint64_t id) { drop_task(self, id); },
    [=](step_atom, const std::shared_ptr<prefill_step_result>& result) {
      on_step_result(self, *result);
      self->state.core->maybe_start(!self->state.tasks.empty());
    },
    [=](stats_atom) {
      const auto& st = self->state;
      return rank_stats{static_cast<int64_t>(st.tasks.size()),
                        st.model->cache.num_blocks(),
                        st.model->cache.num_free_blocks(),
                        st.core->num_steps(),
                        0,
                        st.num_taken,
                        st.core->step_in_flight(),
                        st.core->peer_wait_ms(),
                        st.core->expert_bytes(),
                        st.core->timings().part_seconds(),
                        {},
                        0.0};
    });
}

}  // namespace

prefill_rank_actor spawn_prefill_rank(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                                      rank_model_config cfg, ep_group group, cluster_links links) {
  return sys.spawn(prefill_rank, std::move(weights), cfg, std::move(group), std::move(links));
}

}  // namespace moe
