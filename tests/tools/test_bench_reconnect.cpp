// tests/tools/test_bench_reconnect.cpp
// `bench --backend openai` against a server that closes the connection after every streamed
// answer, as llama-server does whatever its keep-alive header says: a stand-in on a loopback
// socket answers /v1/models and each completion (three tokens, the usage chunk, [DONE]), then
// closes; a request the bench pipelined behind the answered one is dropped unanswered. Every
// request must still complete, each on a connection of its own.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "tools/bench_runner.hpp"

using namespace moe::tools;

namespace {

// A one-thread HTTP stand-in for llama-server on 127.0.0.1 (any free port).
class closing_server {
 public:
  closing_server() {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    bound_port = ntohs(addr.sin_port);
    REQUIRE(::listen(listen_fd, 16) == 0);
    acceptor = std::thread([this] { serve(); });
  }
  ~closing_server() {
    stopping = true;
    ::shutdown(listen_fd, SHUT_RDWR);
    ::close(listen_fd);
    acceptor.join();
  }
  closing_server(const closing_server&) = delete;
  closing_server& operator=(const closing_server&) = delete;

  [[nodiscard]] uint16_t port() const { return bound_port; }
  std::atomic<int> connections{0}, completions{0};

 private:
  void serve() {
    while (!stopping) {
      const int c = ::accept(listen_fd, nullptr, nullptr);
      if (c < 0)
        return;
      ++connections;
      serve_connection(c);
      ::close(c);
    }
  }

  // Answers requests until one completion is answered, then returns (the caller closes).
  void serve_connection(int c) {
    std::string in;
    char buf[4096];
    for (;;) {
      const size_t head_end = in.find("\r\n\r\n");
      if (head_end == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0)
          return;
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      size_t body = 0;
      if (const size_t at = in.find("Content-Length: "); at != std::string::npos && at < head_end)
        body = std::stoul(in.substr(at + 16));
      if (in.size() < head_end + 4 + body) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0)
          return;
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      const bool models = in.starts_with("GET /v1/models");
      in.erase(0, head_end + 4 + body);
      if (models) {
        const std::string json =
          R"({"object":"list","data":[{"id":"stand-in","object":"model","meta":{"n_vocab":1000,"n_ctx_train":4096}}]})";
        send_all(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(json.size()) + "\r\n\r\n" + json);
        continue;
      }
      std::string sse;
      for (int i = 0; i < 3; ++i)
        sse += R"(data: {"choices":[{"index":0,"text":"a","finish_reason":null}]})"
               "\n\n";
      sse += R"(data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11}})"
             "\n\ndata: [DONE]\n\n";
      send_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
                  "Content-Length: " +
                    std::to_string(sse.size()) + "\r\n\r\n" + sse);
      ++completions;
      return;  // and close, whatever was said about keep-alive
    }
  }

  static void send_all(int c, const std::string& bytes) {
    for (size_t sent = 0; sent < bytes.size();) {
      const ssize_t n = ::send(c, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        return;
      sent += static_cast<size_t>(n);
    }
  }

  int listen_fd = -1;
  uint16_t bound_port = 0;
  std::atomic<bool> stopping{false};
  std::thread acceptor;
};

}  // namespace

TEST_CASE("bench openai: a server that closes after every answer still gets every request, once") {
  closing_server server;
  bench_config cfg;
  cfg.port = server.port();
  cfg.backend = "openai";
  cfg.num_prompts = 12;
  cfg.max_concurrency = 2;
  cfg.num_connections = 2;
  cfg.shape.input_len = 8;
  cfg.shape.output_len = 3;
  cfg.grace_s = 5.0;
  const bench_run run = run_bench(cfg);
  REQUIRE(run.records.size() == 12);
  for (const bench_record& r : run.records) {
    CAPTURE(r.error);
    CHECK(r.success);
    CHECK(r.output_tokens == 3);
  }
  CHECK(server.completions == 12);  // none sent twice to be answered twice
  CHECK(server.connections >= 12);  // a new connection after each close
}
