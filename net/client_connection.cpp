// net/client_connection.cpp
// NOTE: everything here runs on the server's one io thread.
#include "net/client_connection.hpp"

#include <utility>

namespace moe::net {
namespace {

// What a queued answer costs beyond its bytes (its string and queue slot), so that many tiny
// answers to a client that does not read count against max_write_buffer as the memory they hold.
constexpr size_t queued_reply_overhead = 64;

}  // namespace

client_connection::client_connection(asio::ip::tcp::socket socket,
                                     std::shared_ptr<const server_shared> shared)
    : shared_(std::move(shared)), socket_(std::move(socket)), timer_(socket_.get_executor()) {
  ++shared_->counters->num_connections;
  ++shared_->counters->num_accepted;
}

client_connection::~client_connection() {
  --shared_->counters->num_connections;
  shared_->counters->notify_request_ended();
}

void client_connection::start_session() {
  session_ = std::make_shared<rpc_session>(shared_, weak_from_this());
  session_->start();
}

void client_connection::close() {
  if (closed_)
    return;
  closed_ = true;
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  timer_.cancel();
  write_queue_.clear();
  queued_bytes_ = 0;
  on_closed();
  if (session_)
    session_->close();
}

void client_connection::close_after_writes() {
  closing_ = true;
  if (!writing_)
    on_written_closing();
}

void client_connection::send(std::string bytes) {
  if (closed_ || bytes.empty())
    return;
  const size_t cost = bytes.size() + queued_reply_overhead;
  if (queued_bytes_ + cost > shared_->limits.max_write_buffer)
    return close();  // a reader too slow: drop it
  queued_bytes_ += cost;
  write_queue_.push_back(std::move(bytes));
  if (!writing_)
    write_next();
}

bool client_connection::stalled(std::chrono::milliseconds limit) const {
  return writing_ && std::chrono::steady_clock::now() - write_progress_ >= limit;
}

void client_connection::write_next() {
  if (write_queue_.empty()) {
    writing_ = false;
    if (closing_)
      on_written_closing();
    else
      on_written();
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

}  // namespace moe::net
