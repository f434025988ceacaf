// net/rpc_connection.cpp
// NOTE: everything here runs on the server's one io thread; the session's answers come through
// write() once its deliver() has posted them here.
#include "net/rpc_connection.hpp"

#include <string_view>
#include <utility>

namespace moe::net {
namespace {

// What a queued reply costs beyond its bytes (its string and queue slot), so that many tiny
// replies to a client that does not read count against max_write_buffer as the memory they hold.
constexpr size_t queued_reply_overhead = 64;

}  // namespace

rpc_connection::rpc_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared)
    : shared_(std::move(shared)), socket_(std::move(socket)), timer_(socket_.get_executor()),
      decoder_(shared_->limits.frames) {
  ++shared_->counters->num_connections;
  ++shared_->counters->num_accepted;
}

rpc_connection::~rpc_connection() {
  --shared_->counters->num_connections;
  shared_->counters->notify_request_ended();
}

void rpc_connection::start() {
  session_ = std::make_shared<rpc_session>(shared_, weak_from_this());
  session_->start();
  arm_timer(false);
  read();
}

void rpc_connection::close() {
  if (closed_)
    return;
  closed_ = true;
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  timer_.cancel();
  write_queue_.clear();
  queued_bytes_ = 0;
  if (session_)
    session_->close();
}

void rpc_connection::shed(const rpc_error& error) {
  if (closed_)
    return;
  session_->shed(error);
  close_after_writes();
}

void rpc_connection::read() {
  socket_.async_read_some(asio::buffer(read_buffer_),
                          [self = shared_from_this()](std::error_code ec, size_t n) {
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

void rpc_connection::write(msgpack::sbuffer bytes) {
  if (closed_)
    return;
  const size_t cost = bytes.size() + queued_reply_overhead;
  if (queued_bytes_ + cost > shared_->limits.max_write_buffer)
    return close();  // a reader too slow: drop it
  queued_bytes_ += cost;
  write_queue_.emplace_back(bytes.data(), bytes.size());
  if (!writing_)
    write_next();
}

void rpc_connection::write_next() {
  if (write_queue_.empty()) {
    writing_ = false;
    if (closing_)
      close();
    return;
  }
  if (!writing_)
    write_progress_ = std::chrono::steady_clock::now();
  writing_ = true;
  const std::string& front = write_queue_.front();
  asio::async_write(socket_, asio::buffer(front.data(), front.size()),
                    [self = shared_from_this()](std::error_code ec, size_t) {
                      if (self->closed_)
                        return;
                      if (ec)
                        return self->close();
                      self->write_progress_ = std::chrono::steady_clock::now();
                      self->queued_bytes_ -= self->write_queue_.front().size() + queued_reply_overhead;
                      self->write_queue_.pop_front();
                      self->write_next();
                    });
}

void rpc_connection::close_after_writes() {
  closing_ = true;
  if (!writing_)
    close();
}

void rpc_connection::arm_timer(bool message_started) {
  const server_limits& limits = shared_->limits;
  timer_.expires_after(message_started ? limits.read_timeout : limits.idle_timeout);
  timer_.async_wait([self = shared_from_this(), message_started](std::error_code ec) {
    if (ec || self->closed_ || self->timer_.expiry() > std::chrono::steady_clock::now())
      return;  // cancelled or re-armed
    if (message_started)
      return self->close();  // a message stopped arriving
    const auto limit = self->shared_->limits.idle_timeout;
    if (self->writing_ && std::chrono::steady_clock::now() - self->write_progress_ >= limit)
      return self->close();  // a reader that stopped reading
    if (self->session_->busy() || self->writing_)
      return self->arm_timer(false);  // busy, not idle
    self->close();
  });
}

}  // namespace moe::net
