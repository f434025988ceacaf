// actors/metrics.cpp
#include "actors/metrics.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <deque>

namespace moe {

namespace {

using clock = std::chrono::steady_clock;

usage_totals total(const std::deque<std::pair<clock::time_point, request_record>>& records,
                   clock::time_point since) {
  usage_totals t;
  int64_t num_speeds = 0;
  for (const auto& [at, r] : records) {
    if (at < since)
      continue;
    ++t.num_requests;
    t.num_errors += r.reason == finish_reason::error;
    t.num_aborted += r.reason == finish_reason::abort;
    t.num_input_tokens += r.num_prompt_tokens;
    t.num_cached_tokens += r.num_cached_tokens;
    t.num_output_tokens += r.num_output_tokens;
    t.mean_ttft_s += r.ttft_s;
    if (r.num_output_tokens > 1 && r.total_s > r.ttft_s) {
      t.mean_output_tok_per_s += static_cast<double>(r.num_output_tokens - 1) / (r.total_s - r.ttft_s);
      ++num_speeds;
    }
  }
  if (t.num_requests)
    t.mean_ttft_s /= static_cast<double>(t.num_requests);
  if (num_speeds)
    t.mean_output_tok_per_s /= static_cast<double>(num_speeds);
  return t;
}

struct metrics_state {
  double window_s = 60.0;
  clock::time_point start = clock::now();
  usage_totals before_window;  // records that left the window, folded
  std::deque<std::pair<clock::time_point, request_record>> recent;
  static inline const char* name = "metrics";
};

void add(usage_totals& into, const usage_totals& x) {
  const auto mean = [](double a, int64_t na, double b, int64_t nb) {
    return na + nb
             ? (a * static_cast<double>(na) + b * static_cast<double>(nb)) / static_cast<double>(na + nb)
             : 0.0;
  };
  into.mean_ttft_s = mean(into.mean_ttft_s, into.num_requests, x.mean_ttft_s, x.num_requests);
  into.mean_output_tok_per_s = mean(into.mean_output_tok_per_s, into.num_requests, x.mean_output_tok_per_s,
                                    x.num_requests);
  into.num_requests += x.num_requests;
  into.num_errors += x.num_errors;
  into.num_aborted += x.num_aborted;
  into.num_input_tokens += x.num_input_tokens;
  into.num_cached_tokens += x.num_cached_tokens;
  into.num_output_tokens += x.num_output_tokens;
}

}  // namespace

metrics_actor::behavior_type metrics(metrics_actor::stateful_pointer<metrics_state> self, double window_s) {
  self->state.window_s = window_s;
  return {
    [=](done_atom, const request_record& r) {
      auto& st = self->state;
      const auto now = clock::now();
      st.recent.emplace_back(now, r);
      const auto cutoff =
        now - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(st.window_s));
      std::deque<std::pair<clock::time_point, request_record>> old;
      while (!st.recent.empty() && st.recent.front().first < cutoff) {
        old.push_back(st.recent.front());
        st.recent.pop_front();
      }
      if (!old.empty())
        add(st.before_window, total(old, clock::time_point::min()));
    },
    [=](stats_atom) {
      const auto& st = self->state;
      const auto now = clock::now();
      metrics_snapshot s;
      s.window_s = st.window_s;
      s.uptime_s = std::chrono::duration<double>(now - st.start).count();
      const auto cutoff =
        now - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(st.window_s));
      s.window = total(st.recent, cutoff);
      s.since_start = st.before_window;
      add(s.since_start, total(st.recent, clock::time_point::min()));
      return s;
    },
  };
}

metrics_actor spawn_metrics(caf::actor_system& sys, double window_s) { return sys.spawn(metrics, window_s); }

}  // namespace moe
