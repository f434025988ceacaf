// tools/wire_client.cpp
#include "tools/wire_client.hpp"

#include <poll.h>

#include <array>
#include <vector>

#include "config/model_config.hpp"  // input_error

namespace moe::tools {

namespace {

net::frame_limits big_limits() {
  return {.max_frame_bytes = size_t{64} << 20, .max_str_bytes = size_t{64} << 20};
}

}  // namespace

wire_client::wire_client(const std::string& host, uint16_t port) : socket_(io_), decoder_(big_limits()) {
  std::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec)
    socket_.connect({address, port}, ec);
  if (ec)
    throw input_error("cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message());
  socket_.set_option(asio::ip::tcp::no_delay(true));
}

void wire_client::send(std::string_view bytes) {
  asio::write(socket_, asio::buffer(bytes.data(), bytes.size()));
}

bool wire_client::read_more(std::chrono::milliseconds timeout) {
  pollfd p{socket_.native_handle(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1)
    return false;
  std::array<char, 65536> buf{};
  std::error_code ec;
  const size_t n = socket_.read_some(asio::buffer(buf), ec);
  if (ec)
    throw input_error("the server closed the connection (" + ec.message() + ")");
  std::vector<net::rpc_message> got;
  decoder_.feed(std::string_view(buf.data(), n), got);
  for (net::rpc_message& m : got)
    pending_.push_back(std::move(m));
  return true;
}

std::optional<net::rpc_message> wire_client::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pending_.empty()) {
    const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !read_more(left))
      return std::nullopt;
  }
  net::rpc_message m = std::move(pending_.front());
  pending_.pop_front();
  return m;
}

net::rpc_response wire_client::call(const msgpack::sbuffer& request, uint32_t msgid,
                                    std::chrono::milliseconds timeout) {
  send(request);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto m = next(std::max(left, std::chrono::milliseconds(0)));
    if (!m)
      throw input_error("no answer to request " + std::to_string(msgid) + " in time");
    if (auto* r = std::get_if<net::rpc_response>(&*m); r && r->msgid == msgid)
      return std::move(*r);
  }
}

}  // namespace moe::tools
