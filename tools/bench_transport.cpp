// tools/bench_transport.cpp
// `moeserve bench-transport`: how fast a tensor message crosses from one OS process to another
// over CAF's middleman (loopback TCP), as kv_pages with their raw-blob inspect: per size, the
// latency of one message and its acknowledgement (median and minimum of --iters), and the
// throughput of --window messages in flight. The peer is this binary run again as
// `bench-transport --serve`, a child that ends when its parent does (its stdin closes); it
// acknowledges each message with a checksum of the floats it received, checked here.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "actors/kernel_inspect.hpp"
#include "actors/system_config.hpp"
#include "tools/commands.hpp"

namespace moe::tools {
namespace {

using clock = std::chrono::steady_clock;

struct transport_options {
  std::vector<int64_t> sizes{4096, 65536, 1 << 20, 16 << 20};  // bytes of floats per message
  int64_t iters = 50;
  int64_t window = 8;
  bool serve = false;
};

// A position-weighted sum of the floats' 64-bit words (fast enough not to be what is timed): what
// the peer says it received.
uint64_t checksum(const kv_pages& p) {
  const size_t bytes = p.data.size() * sizeof(float);
  uint64_t h = bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, reinterpret_cast<const char*>(p.data.data()) + i, 8);
    h += w * (2 * i + 1);
  }
  for (; i < bytes; ++i)
    h += static_cast<uint64_t>(reinterpret_cast<const unsigned char*>(p.data.data())[i]) * (2 * i + 1);
  return h;
}

// As a cluster's processes are (heartbeats of config/cluster.toml's defaults).
void configure(caf::actor_system_config& cfg) {
  configure_actor_system(cfg);
  configure_remote(cfg, 0.1, 1.0);
}

// The peer: publishes the acknowledging actor on a free loopback port, prints it, and runs
// until its stdin closes.
void serve_peer() {
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto ack = sys.spawn([]() -> caf::behavior { return {[](const kv_pages& p) { return checksum(p); }}; });
  auto port = sys.middleman().publish(ack, 0, "127.0.0.1", true);
  if (!port)
    throw std::runtime_error("bench-transport --serve: cannot publish: " + sys.render(port.error()));
  std::printf("listening on 127.0.0.1:%u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {}
  caf::anon_send_exit(ack, caf::exit_reason::user_shutdown);
}

// This binary as `bench-transport --serve`, its stdin and stdout piped here.
struct peer_process {
  pid_t pid = -1;
  int to_child = -1;
  uint16_t port = 0;

  peer_process() {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
      throw std::runtime_error("bench-transport: pipe failed");
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      execl("/proc/self/exe", "moeserve", "bench-transport", "--serve", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child = in[1];
    std::string line;
    char ch = 0;
    while (read(out[0], &ch, 1) == 1 && ch != '\n')
      line += ch;
    close(out[0]);
    const auto colon = line.rfind(':');
    if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) {
      stop();
      throw std::runtime_error("bench-transport: the peer process did not start (\"" + line + "\")");
    }
    port = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
  }
  void stop() {
    if (to_child >= 0)
      close(to_child);
    to_child = -1;
    if (pid > 0)
      waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~peer_process() { stop(); }
  peer_process(const peer_process&) = delete;
  peer_process& operator=(const peer_process&) = delete;
};

kv_pages pages_of(int64_t bytes) {
  kv_pages p{.num_layers = 1, .num_tokens = 1, .kv_dim = std::max<int64_t>(bytes / 4, 1), .data = {}};
  p.data.resize(static_cast<size_t>(p.kv_dim));
  for (size_t i = 0; i < p.data.size(); ++i)
    p.data[i] = static_cast<float>(i % 977) * 0.5f;
  return p;
}

double ms_since(clock::time_point t) {
  return std::chrono::duration<double, std::milli>(clock::now() - t).count();
}

void run_transport(const transport_options& o) {
  if (o.serve) {
    serve_peer();
    return;
  }
  peer_process peer;
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto remote = sys.middleman().remote_actor("127.0.0.1", peer.port);
  if (!remote)
    throw std::runtime_error("bench-transport: cannot reach the peer: " + sys.render(remote.error()));
  caf::scoped_actor self{sys};
  const auto timeout = std::chrono::seconds(60);
  std::printf("middleman (CAF 0.17, loopback TCP), kv_pages raw blob, 2 processes\n");
  std::printf("%12s %12s %12s %14s\n", "bytes", "p50 ms", "min ms", "MB/s (window)");
  for (const int64_t size : o.sizes) {
    const kv_pages pages = pages_of(size);
    const uint64_t want = checksum(pages);
    const caf::message msg = caf::make_message(pages);
    const auto check = [&](uint64_t got) {
      if (got != want)
        throw std::runtime_error("bench-transport: the peer received other bytes than were sent");
    };
    std::vector<double> lat;
    for (int64_t i = 0; i < o.iters; ++i) {
      const auto t = clock::now();
      self->send(*remote, msg);
      self->receive([&](uint64_t got) { check(got); },
                    caf::after(timeout) >>
                      [] { throw std::runtime_error("bench-transport: no acknowledgement within 60 s"); });
      lat.push_back(ms_since(t));
    }
    std::sort(lat.begin(), lat.end());
    const auto t = clock::now();
    const int64_t n = std::max<int64_t>(o.iters, o.window);
    int64_t sent = 0, acked = 0;
    for (; sent < std::min(n, o.window); ++sent)
      self->send(*remote, msg);
    while (acked < n) {
      self->receive([&](uint64_t got) { check(got); },
                    caf::after(timeout) >>
                      [] { throw std::runtime_error("bench-transport: no acknowledgement within 60 s"); });
      ++acked;
      if (sent < n) {
        self->send(*remote, msg);
        ++sent;
      }
    }
    const double mb_s = static_cast<double>(n) * static_cast<double>(pages.data.size() * sizeof(float)) /
                        (ms_since(t) / 1000.0) / 1e6;
    std::printf("%12lld %12.3f %12.3f %14.1f\n", static_cast<long long>(size), lat[lat.size() / 2],
                lat.front(), mb_s);
    std::fflush(stdout);
  }
}

}  // namespace

void add_bench_transport(CLI::App& app) {
  auto opts = std::make_shared<transport_options>();
  CLI::App* cmd = app.add_subcommand(
    "bench-transport", "Time tensor messages between two processes over CAF's middleman (loopback)");
  cmd->add_option("--sizes", opts->sizes, "Message sizes in bytes")->capture_default_str()->delimiter(',');
  cmd->add_option("--iters", opts->iters, "Messages timed one at a time per size")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  cmd->add_option("--window", opts->window, "Messages in flight for the throughput")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--serve", opts->serve, "Run as the peer (started by bench-transport itself)")->group("");
  cmd->callback([opts] {
    for (const int64_t s : opts->sizes)
      if (s < 4 || s > (int64_t{1} << 30))
        throw input_error("--sizes: each size must be in 4..2^30 bytes, got " + std::to_string(s));
    run_transport(*opts);
  });
}

}  // namespace moe::tools
