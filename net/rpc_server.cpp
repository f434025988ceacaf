// net/rpc_server.cpp
// NOTE: bridge actors may still post to a session after stop(); every connection holds the
// io_context (through server_shared), so it outlives them all.
#include "net/rpc_server.hpp"

#include <array>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "config/model_config.hpp"
#include "net/http/http_connection.hpp"
#include "net/http/http_response.hpp"
#include "net/rpc_connection.hpp"
#include "net/server_log.hpp"
#include "net/serving_metrics.hpp"
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

/// A refused HTTP connection: its answer, then what it sends is dropped until it closes.
struct refusal {
  asio::ip::tcp::socket socket;
  asio::steady_timer timer;  // closes it if the client does not
  std::string bytes;
  std::array<char, 4096> sink{};
};

void drop_until_closed(const std::shared_ptr<refusal>& r) {
  r->socket.async_read_some(asio::buffer(r->sink), [r](std::error_code ec, size_t) {
    if (ec)
      r->timer.cancel();  // the client closed: so do we
    else
      drop_until_closed(r);
  });
}

/// Binds `acceptor` to address:port and listens; throws input_error when it cannot.
void listen(asio::ip::tcp::acceptor& acceptor, const asio::ip::address& address, const std::string& host,
            uint16_t port) {
  std::error_code ec;
  const asio::ip::tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec)
    acceptor.bind(endpoint, ec);
  if (!ec)
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw input_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
}

}  // namespace

struct rpc_server::impl {
  std::shared_ptr<asio::io_context> io = std::make_shared<asio::io_context>();
  asio::ip::tcp::acceptor acceptor{*io};
  asio::ip::tcp::acceptor http_acceptor{*io};  // open when the HTTP front is on
  std::shared_ptr<server_shared> shared;
  std::vector<std::weak_ptr<rpc_connection>> connections;  // io thread only
  std::vector<std::weak_ptr<http_connection>> http_connections;
  caf::actor stats_sampler;  // the first: the supervisor restarts it
  std::thread thread;
  std::string host;
  uint16_t port = 0;
  uint16_t http_port = 0;
  bool stopped = false;

  bool accept_failing = false;  // io thread only

  void accept(asio::ip::tcp::acceptor& from) {
    from.async_accept([this, &from](std::error_code ec, asio::ip::tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !from.is_open())
        return;  // closed by stop()
      if (ec) {
        // out of file descriptors (EMFILE, ENFILE), memory, or a connection reset before it
        // was taken: keep serving the connections there are and try again shortly
        if (!accept_failing)
          server_log().warn("accept failed ({}); retrying every 100 ms", ec.message());
        accept_failing = true;
        auto retry = std::make_shared<asio::steady_timer>(*io, std::chrono::milliseconds(100));
        retry->async_wait([this, &from, retry](std::error_code wait_ec) {
          if (!wait_ec && from.is_open())
            accept(from);
        });
        return;
      }
      if (accept_failing)
        server_log().info("accepting connections again");
      accept_failing = false;
      // streamed tokens go out at once: Nagle would hold a small write behind an unacknowledged
      // one (an HTTP stream's head) for the client's delayed ACK, ~40 ms
      std::error_code ignored;
      socket.set_option(asio::ip::tcp::no_delay(true), ignored);
      if (&from == &http_acceptor)
        admit_http(std::move(socket));
      else
        admit(std::move(socket));
      accept(from);
    });
  }

  /// Open connections of both fronts.
  size_t num_open() {
    std::erase_if(connections, [](const auto& c) { return c.expired(); });
    std::erase_if(http_connections, [](const auto& c) { return c.expired(); });
    return connections.size() + http_connections.size();
  }

  void admit_http(asio::ip::tcp::socket socket) {
    if (num_open() >= shared->limits.max_connections) {
      return refuse_http(std::move(socket));
    }
    auto connection = std::make_shared<http_connection>(std::move(socket), shared);
    http_connections.push_back(connection);
    connection->start();
  }

  void admit(asio::ip::tcp::socket socket) {
    if (num_open() >= shared->limits.max_connections)
      return refuse(std::move(socket));
    auto connection = std::make_shared<rpc_connection>(std::move(socket), shared);
    connections.push_back(connection);
    connection->start();
  }

  /// Over max_connections, over HTTP: a 429, then the request is read and dropped until the
  /// client closes (or 1 s), so that closing does not reset the connection before it reads it.
  void refuse_http(asio::ip::tcp::socket socket) {
    auto r = std::make_shared<refusal>(refusal{
      std::move(socket), asio::steady_timer(*io, std::chrono::seconds(1)),
      http_error_response(
        make_overloaded("connections: " + std::to_string(shared->limits.max_connections) + " open, the limit",
                        1000),
        /*keep_alive=*/false)});
    asio::async_write(r->socket, asio::buffer(r->bytes), [r](std::error_code ec, size_t) {
      std::error_code ignored;
      if (ec)
        return r->socket.close(ignored);
      r->socket.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      r->timer.async_wait([r](std::error_code) {
        std::error_code ignored_too;
        r->socket.close(ignored_too);
      });
      drop_until_closed(r);
    });
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
  listen(impl_->acceptor, address, cfg.host, cfg.port);
  if (cfg.http_port)
    listen(impl_->http_acceptor, address, cfg.host, *cfg.http_port);
  // Actors only once nothing can throw: the actor system waits for them at shutdown.
  auto served = std::make_shared<const serving_target>(std::move(target));
  auto counters = std::make_shared<server_counters>();
  counters->histograms = make_request_histograms();
  impl_->shared = std::make_shared<server_shared>(
    server_shared{impl_->io, sys, served, counters, cfg.limits, std::move(cfg.keys), cfg.fault_injection});
  impl_->stats_sampler = supervise_stats_sampler(
    sys, served, counters,
    {.interval = cfg.stats_interval, .window = cfg.stats_window, .log_interval = cfg.log_stats_interval});
  impl_->host = cfg.host;
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept(impl_->acceptor);
  if (impl_->http_acceptor.is_open()) {
    impl_->http_port = impl_->http_acceptor.local_endpoint().port();
    impl_->accept(impl_->http_acceptor);
  }
  impl_->thread = std::thread([io = impl_->io] { run_io(*io); });
}

rpc_server::~rpc_server() { stop(); }

uint16_t rpc_server::port() const noexcept { return impl_->port; }

uint16_t rpc_server::http_port() const noexcept { return impl_->http_port; }

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
    for (auto& weak : i->http_connections)
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
    i->http_acceptor.close(ignored);
    for (auto& weak : i->connections)
      if (auto c = weak.lock())
        c->close();
    for (auto& weak : i->http_connections)
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
