// net/http/http_connection.hpp
// One HTTP/1.1 client connection, on the server's io thread, beside the wire's: requests are
// parsed by http_request_parser (pipelined ones wait their turn: answers go out in order), each
// becomes the wire method it maps to (OpenAI's bodies translated, net/http/openai_request.hpp)
// and goes to the connection's rpc_session, so that HTTP has the wire's limits, auth (a Bearer
// token per request) and cancel-on-disconnect; the session's answers come back as wire bytes and
// go out as JSON, or as Server-Sent Events for a stream. Keep-alive with an idle timeout; a
// request (head and body) must arrive whole within the read timeout (slow clients).
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "net/http/http_request.hpp"
#include "net/http/openai_response.hpp"
#include "net/client_connection.hpp"

namespace moe::net {

class http_connection : public client_connection {
 public:
  http_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared);

  /// Starts its session and reading (io thread).
  void start();
  /// Shutting down: the request in flight is answered `error`, then the connection closes.
  void shed(const rpc_error& error);
  /// The session's answers (wire bytes), rendered for the request in flight.
  void write(msgpack::sbuffer bytes) override;

 private:
  /// How the wire's result is rendered.
  enum class answer_kind : uint8_t { generate, models, tokenize, detokenize, metrics, plain };
  struct exchange {
    uint32_t msgid = 0;
    answer_kind kind = answer_kind::plain;
    openai_answer answer;  // generate
    bool keep_alive = true;
    bool stream_started = false;  // the stream's head is written: errors go as events
  };

  void read();
  void on_read(std::error_code ec, size_t num_bytes);
  void next();
  void dispatch(http_request& request);
  void route(http_request& request);
  void call(const std::string& method, const msgpack::sbuffer& params, exchange ex);
  void answer(const rpc_response& response);
  void stream_token(const msgpack::object& params);
  /// Ends the request in flight with `bytes`.
  void finish(std::string bytes);
  void fail(const rpc_error& error);
  /// Closes once the client has read the last answer: stops sending, drops what comes, closes
  /// at its end of stream or after a short grace.
  void on_written_closing() override;
  void on_written() override;
  void on_closed() override;
  void arm_timer();

  http_request_parser parser_;
  std::array<char, 16384> read_buffer_{};
  std::deque<http_request> pending_;             // parsed, waiting for the one in flight
  std::optional<http_parse_error> parse_error_;  // answered after pending_, then closed
  std::optional<exchange> current_;              // in flight
  bool current_keep_alive_ = true;
  uint32_t next_msgid_ = 0;
  std::chrono::steady_clock::time_point request_started_;  // first bytes of a partial request
  bool reading_paused_ = false;                            // too many pipelined requests waiting
  bool lingering_ = false;
};

}  // namespace moe::net
