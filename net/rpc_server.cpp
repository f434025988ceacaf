// net/rpc_server.cpp
// NOTE: bridge actors may still post to a connection after stop(); every connection holds the
// io_context (through server_shared), so it outlives them all.
#include "net/rpc_server.hpp"

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "config/model_config.hpp"
#include "net/rpc_connection.hpp"
#include "net/server_log.hpp"
#include "net/stats_sampler.hpp"

namespace moe::net {

namespace {

constexpr uint32_t shutdown_retry_ms = 1000;
constexpr auto flush_timeout = std::chrono::seconds(5);  // for shed answers to be written

/// Runs the io loop until stopped; a handler that throws is reported and the loop goes on.
void run_io(asio::io_context& io) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      server_log().error("io thread: {}", e.what());
    }
  }
}

}  // namespace

struct rpc_server::impl {
  std::shared_ptr<asio::io_context> io = std::make_shared<asio::io_context>();
  asio::ip::tcp::acceptor acceptor{*io};
  std::shared_ptr<server_shared> shared;
  std::vector<std::weak_ptr<rpc_connection>> connections;  // io thread only
  caf::actor stats_sampler;                                // the first: the supervisor restarts it
  std::thread thread;
  std::string host;
  uint16_t port = 0;
  bool stopped = false;

  asio::steady_timer accept_retry{*io};
  bool accept_failing = false;  // io thread only

  void accept() {
    acceptor.async_accept([this](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open())
        return;  // closed by stop()
      if (ec) {
        // out of file descriptors (EMFILE, ENFILE), memory, or a connection reset before it
        // was taken: keep serving the connections there are and try again shortly
        if (!accept_failing)
          server_log().warn("accept failed ({}); retrying every 100 ms", ec.message());
        accept_failing = true;
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](std::error_code wait_ec) {
          if (!wait_ec && acceptor.is_open())
            accept();
        });
        return;
      }
      if (accept_failing)
        server_log().info("accepting connections again");
      accept_failing = false;
      admit(std::move(socket));
      accept();
    });
  }

  void admit(asio::ip::tcp::socket socket) {
    std::erase_if(connections, [](const auto& c) { return c.expired(); });
    if (connections.size() >= shared->limits.max_connections)
      return refuse(std::move(socket));
    auto connection = std::make_shared<rpc_connection>(std::move(socket), shared);
    connections.push_back(connection);
    connection->start();
  }

  /// Over max_connections: one "error" notification (429), then close.
  void refuse(asio::ip::tcp::socket socket) {
    auto held = std::make_shared<asio::ip::tcp::socket>(std::move(socket));
    auto bytes = std::make_shared<msgpack::sbuffer>(encode_error_notification(make_overloaded(
      "connections: " + std::to_string(shared->limits.max_connections) + " open, the limit", 1000)));
    asio::async_write(*held, asio::buffer(bytes->data(), bytes->size()),
                      [held, bytes](std::error_code, size_t) {
                        std::error_code ignored;
                        held->close(ignored);
                      });
  }
};

rpc_server::rpc_server(caf::actor_system& sys, serving_target target, server_config cfg)
    : impl_(std::make_unique<impl>()) {
  std::error_code ec;
  const asio::ip::address address = asio::ip::make_address(cfg.host, ec);
  if (ec)
    throw input_error("--host: expected an IP address, got \"" + cfg.host + "\"");
  const asio::ip::tcp::endpoint endpoint(address, cfg.port);
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    impl_->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec)
    impl_->acceptor.bind(endpoint, ec);
  if (!ec)
    impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw input_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " + ec.message());
  // Actors only once nothing can throw: the actor system waits for them at shutdown.
  auto served = std::make_shared<const serving_target>(std::move(target));
  auto counters = std::make_shared<server_counters>();
  impl_->shared = std::make_shared<server_shared>(
    server_shared{impl_->io, sys, served, counters, cfg.limits, std::move(cfg.keys), cfg.fault_injection});
  impl_->stats_sampler = supervise_stats_sampler(
    sys, served, counters,
    {.interval = cfg.stats_interval, .window = cfg.stats_window, .log_interval = cfg.log_stats_interval});
  impl_->host = cfg.host;
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([io = impl_->io] { run_io(*io); });
}

rpc_server::~rpc_server() { stop(); }

uint16_t rpc_server::port() const noexcept { return impl_->port; }

std::string rpc_server::address() const { return impl_->host + ":" + std::to_string(impl_->port); }

const server_counters& rpc_server::counters() const noexcept { return *impl_->shared->counters; }

int64_t rpc_server::drain(std::chrono::milliseconds grace) {
  server_counters& c = *impl_->shared->counters;
  c.draining = true;
  if (c.wait_for(grace, [&] { return c.num_generates_in_flight.load() == 0; }))
    return 0;
  const int64_t cut = c.num_generates_in_flight.load();
  asio::post(*impl_->io, [i = impl_.get()] {
    const rpc_error error = make_unavailable("generate: the server shut down before the request finished",
                                             shutdown_retry_ms);
    for (auto& weak : i->connections)
      if (auto conn = weak.lock())
        conn->shed(error);
  });
  // the answers are written and the connections close (their bridges cancel what runs)
  c.wait_for(flush_timeout, [&] { return c.num_connections.load() == 0; });
  return cut;
}

void rpc_server::stop() {
  if (impl_->stopped)
    return;
  impl_->stopped = true;
  asio::post(*impl_->io, [i = impl_.get()] {
    std::error_code ignored;
    i->acceptor.close(ignored);
    i->accept_retry.cancel();
    for (auto& weak : i->connections)
      if (auto c = weak.lock())
        c->close();
    i->io->stop();
  });
  impl_->thread.join();
  stop_stats_sampler(impl_->shared->sys, *impl_->shared->target, impl_->stats_sampler);
  impl_->io->restart();  // drop what was posted meanwhile
  impl_->io->poll();
}

}  // namespace moe::net
