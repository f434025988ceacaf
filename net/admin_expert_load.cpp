// net/admin_expert_load.cpp
#include "net/admin_expert_load.hpp"

#include <caf/event_based_actor.hpp>
#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "actors/messages.hpp"
#include "net/rpc_frame.hpp"

namespace moe::net {

namespace {

constexpr auto load_timeout = std::chrono::seconds(10);

// One group's sums.
struct group_load {
  int64_t num_ranks = 0;
  int64_t steps = std::numeric_limits<int64_t>::max();
  int64_t num_layers = 0, num_experts = 0, window_steps = 0;
  std::vector<int64_t> counts;

  void add(const expert_load& l) {
    if (counts.empty()) {
      num_layers = l.num_layers;
      num_experts = l.num_experts;
      counts.assign(l.counts.size(), 0);
    }
    if (l.counts.size() != counts.size())
      return;  // every rank of a model has the same shape
    for (size_t i = 0; i < counts.size(); ++i)
      counts[i] += l.counts[i];
    ++num_ranks;
    steps = std::min(steps, l.steps_covered);
    window_steps = std::max(window_steps, l.window_steps);
  }
};

void pack_matrix(msgpack::packer<msgpack::sbuffer>& pk, int64_t rows, int64_t cols,
                 const std::vector<int64_t>& counts) {
  if (counts.empty())
    rows = 0;
  pk.pack_array(static_cast<uint32_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    pk.pack_array(static_cast<uint32_t>(cols));
    for (int64_t c = 0; c < cols; ++c)
      pk.pack(counts[static_cast<size_t>(r * cols + c)]);
  }
}

void pack_group(msgpack::packer<msgpack::sbuffer>& pk, const group_load& g) {
  pk.pack_map(3).pack("ranks").pack(g.num_ranks);
  pk.pack("steps").pack(g.num_ranks > 0 ? g.steps : 0);
  pk.pack("load");
  pack_matrix(pk, g.num_layers, g.num_experts, g.counts);
}

struct gathered {
  group_load prefill, decode;
  size_t pending = 0;
};

}  // namespace

void spawn_admin_expert_load(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                             uint32_t msgid, const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    const cluster& c = target->handles;
    const size_t num_prefill = c.prefill_ranks.size(), num_ranks = num_prefill + c.decode_ranks.size();
    auto g = std::make_shared<gathered>();
    g->pending = num_ranks;
    const auto finish = [=] {
      group_load both;
      for (const group_load* one : {&g->prefill, &g->decode})
        if (one->num_ranks > 0) {
          if (both.counts.empty()) {
            both = *one;
          } else if (both.counts.size() == one->counts.size()) {
            for (size_t i = 0; i < both.counts.size(); ++i)
              both.counts[i] += one->counts[i];
            both.window_steps = std::max(both.window_steps, one->window_steps);
          }
        }
      msgpack::sbuffer out;
      msgpack::packer<msgpack::sbuffer> pk(out);
      pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(4);
      pk.pack("window_steps").pack(both.window_steps);
      pk.pack("load");
      pack_matrix(pk, both.num_layers, both.num_experts, both.counts);
      pk.pack("prefill");
      pack_group(pk, g->prefill);
      pk.pack("decode");
      pack_group(pk, g->decode);
      reply(std::move(out), std::nullopt);
    };
    if (num_ranks == 0)
      return finish();
    for (size_t i = 0; i < num_ranks; ++i) {
      const bool prefill = i < num_prefill;
      const auto one_done = [=] {
        if (--g->pending == 0)
          finish();
      };
      self->request(c.supervisor, load_timeout, expert_load_atom::value, rank_kind(c, i), rank_index(c, i))
        .then(
          [=](const expert_load& l) {
            (prefill ? g->prefill : g->decode).add(l);
            one_done();
          },
          [=](const caf::error&) { one_done(); });  // being restarted: left out, `ranks` says so
    }
  });
}

}  // namespace moe::net
