// tests/net/server_fixture.hpp
// A served tiny model on a loopback ephemeral port (1 prefill + 1 decode rank, CPU reference),
// the single-rank generator and logits to compare with, and a blocking test client that never
// waits longer than 30 s for a message.
#pragma once

#include <asio.hpp>
#include <doctest/doctest.h>
#include <caf/all.hpp>
#include <poll.h>

#include <deque>
#include <filesystem>
#include <stdexcept>

#include "actors/cluster.hpp"
#include "actors/errors.hpp"
#include "actors/system_config.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"
#include "net/rpc_server.hpp"

namespace moe::testing {

inline bool have_tokenizer() {
  return std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json");
}

/// True (after saying why) when set-up has not installed the tokenizer: `if (skip_without_tokenizer()) return;`
inline bool skip_without_tokenizer() {
  if (have_tokenizer())
    return false;
  MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
  return true;
}

inline topology_config small_topology() {
  topology_config topo;
  topo.prefill_ranks = 1;
  topo.decode_ranks = 1;
  topo.max_running_requests = 8;
  topo.kv_blocks = 96;
  topo.page_size = 4;
  topo.max_context = 128;
  return topo;
}

struct server_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  topology_config topo = small_topology();
  std::shared_ptr<const tokenizer> tok;
  std::shared_ptr<const model_weights> weights;
  cluster handles;
  std::unique_ptr<net::rpc_server> server;

  static caf::actor_system_config& tune(caf::actor_system_config& c) {
    c.set("scheduler.max-threads", 2);
    configure_actor_system(c);
    return c;
  }
  server_fixture() : sys{tune(cfg)}, self{sys} {}

  /// Spawns the cluster and the server (call once the tokenizer is known to exist), over a tiny
  /// model of `vocab_size` tokens.
  void start(net::server_limits limits = {}, net::auth_keys keys = {}, int64_t vocab_size = 1000,
             bool fault_injection = false) {
    tok = tokenizer::load(MOE_TOKENIZER_DIR);
    weights = std::make_shared<const model_weights>(tiny_model_builder(9).build(tiny_config(vocab_size)));
    handles = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
    server = std::make_unique<net::rpc_server>(
      sys,
      net::serving_target{.handles = handles,
                          .tok = tok,
                          .vocab_size = vocab_size,
                          .max_context = static_cast<size_t>(topo.max_context),
                          .model_name = "tiny"},
      net::server_config{.limits = limits, .keys = std::move(keys), .fault_injection = fault_injection});
  }
  ~server_fixture() {
    if (server)
      server->stop();
    if (handles.root)
      handles.stop();
  }

  /// What the single-rank generator makes of `prompt_ids` (the same EP payload types).
  generation_result reference_run(const std::vector<int32_t>& prompt_ids, const sampling_params& p) {
    auto backend = make_cpu_reference_backend();
    kv_cache cache(weights->config.num_hidden_layers, 96, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *backend, cache, {.ep = ep_precision_of(topo)});
    generator gen(runner, tok, topo.chunked_prefill_size);
    return gen.run(prompt_ids, p);
  }

  /// The single-rank path's logits at every position of `ids` ([ids.size(), vocab], as
  /// `moeserve logits` writes them): row i is the distribution of the token after ids[i].
  std::vector<float> reference_logits(const std::vector<int32_t>& ids) {
    auto backend = make_cpu_reference_backend();
    kv_cache cache(weights->config.num_hidden_layers, 96, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *backend, cache, {.ep = ep_precision_of(topo)});
    sequence_kv kv;
    std::vector<float> logits = runner.prefill(ids, kv, topo.chunked_prefill_size, /*all_logits=*/true);
    kv.release(cache);
    return logits;
  }

  /// Every rank's stats once nothing runs (asks again while the last step is on its way).
  std::vector<rank_stats> idle_rank_stats() {
    std::vector<rank_stats> out;
    auto ask = [&](const auto& rank) {
      rank_stats s{};
      for (int tries = 0; tries < 100000; ++tries) {
        self->request(rank, std::chrono::seconds(5), stats_atom::value)
          .receive([&](const rank_stats& r) { s = r; }, [&](caf::error&) {});
        if (s.num_running == 0 && s.num_free_blocks == s.num_blocks)
          break;
      }
      out.push_back(s);
    };
    for (const auto& r : handles.prefill_ranks)
      ask(r);
    for (const auto& r : handles.decode_ranks)
      ask(r);
    return out;
  }
};

/// A blocking client over loopback.
class test_client {
 public:
  explicit test_client(uint16_t port) : socket_(io_), decoder_(big_limits()) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
    socket_.set_option(asio::ip::tcp::no_delay(true));
  }

  void send(std::string_view bytes) { asio::write(socket_, asio::buffer(bytes.data(), bytes.size())); }
  void send_bytewise(std::string_view bytes) {
    for (char c : bytes)
      asio::write(socket_, asio::buffer(&c, 1));
  }
  void close() { socket_.close(); }

  /// The next message; throws after 30 s without one, or when the server closed.
  net::rpc_message next() {
    while (pending_.empty())
      if (!read_more())
        throw std::runtime_error("the server closed the connection");
    net::rpc_message m = std::move(pending_.front());
    pending_.pop_front();
    return m;
  }
  /// The next response (skipping notifications into `notes`).
  net::rpc_response next_response(std::vector<net::rpc_notification>* notes = nullptr) {
    for (;;) {
      net::rpc_message m = next();
      if (auto* r = std::get_if<net::rpc_response>(&m))
        return std::move(*r);
      if (auto* n = std::get_if<net::rpc_notification>(&m); n && notes)
        notes->push_back(std::move(*n));
    }
  }
  /// True once the server has closed the connection (messages before that are dropped).
  bool closed_by_server() {
    pending_.clear();
    try {
      while (read_more())
        pending_.clear();
    } catch (const std::runtime_error&) {
      return false;  // timed out: still open
    }
    return true;
  }

 private:
  static net::frame_limits big_limits() {
    return {.max_frame_bytes = size_t{64} << 20, .max_str_bytes = size_t{64} << 20};
  }
  bool read_more() {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1)
      throw std::runtime_error("no message from the server in 30 s");
    std::array<char, 16384> buf{};
    std::error_code ec;
    const size_t n = socket_.read_some(asio::buffer(buf), ec);
    if (ec)
      return false;
    for (auto& m : decoder_.feed(std::string_view(buf.data(), n)))
      pending_.push_back(std::move(m));
    return true;
  }

  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  net::frame_decoder decoder_;
  std::deque<net::rpc_message> pending_;
};

/// The error map's code, or 0 for a result.
inline int error_code(const net::rpc_response& r) {
  if (r.error.is_nil())
    return 0;
  return r.error.as<std::map<std::string, msgpack::object>>().at("code").as<int>();
}

inline std::map<std::string, msgpack::object> result_map(const net::rpc_response& r) {
  return r.result.as<std::map<std::string, msgpack::object>>();
}

/// Sends `request` and returns the next response (notifications meanwhile are dropped).
inline net::rpc_response ask(test_client& client, const std::string& request) {
  client.send(request);
  return client.next_response();
}

}  // namespace moe::testing
