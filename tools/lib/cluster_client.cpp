// tools/lib/cluster_client.cpp
#include "tools/lib/cluster_client.hpp"

#include <caf/scoped_actor.hpp>
#include <chrono>
#include <map>
#include <random>
#include <stdexcept>

#include "actors/errors.hpp"

namespace moe::tools {

cluster_run run_requests(caf::actor_system& sys, const cluster& c, const std::vector<request_spec>& specs,
                         int64_t concurrency, const std::function<void(std::string_view)>& on_text,
                         double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  caf::scoped_actor self{sys};
  self->monitor(c.root);  // a dead cluster ends the run with its reason, not a hang
  cluster_run run;
  run.requests.resize(specs.size());
  std::map<uint64_t, size_t> index_of;
  std::vector<clock::time_point> submitted(specs.size());
  const auto start = clock::now();
  size_t next = 0, num_done = 0;
  int64_t in_flight = 0;
  while (num_done < specs.size()) {
    while (next < specs.size() && in_flight < concurrency) {
      bool accepted = false;
      submitted[next] = clock::now();
      self->request(c.queue, std::chrono::seconds(10), submit_atom::value, specs[next])
        .receive(
          [&](uint64_t id) {
            index_of[id] = next;
            accepted = true;
          },
          [&](caf::error& e) {
            if (e != caf::make_error(serve_errc::overloaded))
              throw std::runtime_error("submit failed: " + sys.render(e));
            ++run.num_rejected;
          });
      if (!accepted)
        break;  // overloaded: wait for an answer first
      run.requests[next].num_prompt_tokens = static_cast<int64_t>(specs[next].prompt_ids.size());
      ++next;
      ++in_flight;
    }
    bool timed_out = false;
    self->receive([&](attach_atom, uint64_t, const caf::actor&) {},  // its session
                  [&](token_atom, const stream_chunk& chunk) {
                    const size_t i = index_of.at(chunk.request_id);
                    cluster_request_result& r = run.requests[i];
                    const double t = seconds(clock::now() - submitted[i]);
                    if (r.token_times_s.empty())
                      r.ttft_s = t;
                    r.token_times_s.push_back(t);
                    if (i == 0 && on_text)
                      on_text(chunk.text_delta);
                  },
                  [&](done_atom, session_result& result) {
                    const size_t i = index_of.at(result.request_id);
                    run.requests[i].total_s = seconds(clock::now() - submitted[i]);
                    run.requests[i].result = std::move(result);
                    ++num_done;
                    --in_flight;
                  },
                  [&](caf::down_msg& down) {
                    throw std::runtime_error("the cluster stopped: " + sys.render(down.reason));
                  },
                  caf::after(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))) >>
                    [&] { timed_out = true; });
    if (timed_out)
      throw std::runtime_error("the cluster answered nothing for " + std::to_string(timeout_s) + " s");
  }
  run.wall_s = seconds(clock::now() - start);
  return run;
}

std::vector<request_spec> random_requests(int64_t count, int64_t prompt_len, int64_t output_len,
                                          int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<request_spec> specs(static_cast<size_t>(count));
  for (request_spec& s : specs) {
    s.prompt_ids.push_back(0);
    while (static_cast<int64_t>(s.prompt_ids.size()) < prompt_len)
      s.prompt_ids.push_back(static_cast<int32_t>(1 + rng() % static_cast<uint64_t>(vocab - 1)));
    s.sampling.temperature = 0.0f;
    s.sampling.max_tokens = static_cast<int32_t>(output_len);
    s.sampling.ignore_eos = true;
  }
  return specs;
}

}  // namespace moe::tools
