// net/rpc_connection.cpp
// NOTE: everything here runs on the server's one io thread; the session's answers come through
// write() once its deliver() has posted them here.
#include "net/rpc_connection.hpp"

#include <string_view>
#include <utility>

namespace moe::net {

rpc_connection::rpc_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared)
    : client_connection(std::move(socket), std::move(shared)), decoder_(shared_->limits.frames) {}

void rpc_connection::start() {
  start_session();
  arm_timer(false);
  read();
}

void rpc_connection::shed(const rpc_error& error) {
  if (closed_)
    return;
  session_->shed(error);
  close_after_writes();
}

void rpc_connection::write(msgpack::sbuffer bytes) {
  send(std::string(bytes.data(), bytes.size()));  // its exact size: an sbuffer reserves 8 KiB
}

void rpc_connection::read() {
  socket_.async_read_some(asio::buffer(read_buffer_),
                          [self = self<rpc_connection>()](std::error_code ec, size_t n) {
                            self->on_read(ec, n);
                          });
}

void rpc_connection::on_read(std::error_code ec, size_t num_bytes) {
  if (closed_)
    return;
  if (ec)
    return close();  // the client went away
  const bool was_started = decoder_.partial_bytes() > 0;
  messages_.clear();
  decoder_.feed(std::string_view(read_buffer_.data(), num_bytes), messages_);
  for (rpc_message& message : messages_) {
    if (closed_ || closing_)
      break;
    session_->handle(message);
  }
  if (closed_ || closing_)
    return;
  const bool started = decoder_.partial_bytes() > 0;
  // a message's clock starts once: when its first bytes come (what is left after messages
  // that completed in this read is a new one)
  if (!started || !was_started || !messages_.empty())
    arm_timer(started);
  read();
}

void rpc_connection::arm_timer(bool message_started) {
  const server_limits& limits = shared_->limits;
  timer_.expires_after(message_started ? limits.read_timeout : limits.idle_timeout);
  timer_.async_wait([self = self<rpc_connection>(), message_started](std::error_code ec) {
    if (ec || self->closed_ || self->timer_.expiry() > std::chrono::steady_clock::now())
      return;  // cancelled or re-armed
    if (message_started)
      return self->close();  // a message stopped arriving
    if (self->stalled(self->shared_->limits.idle_timeout))
      return self->close();  // a reader that stopped reading
    if (self->session_->busy() || self->writing_)
      return self->arm_timer(false);  // busy, not idle
    self->close();
  });
}

}  // namespace moe::net
