// tools/bench_transport.cpp
// `moeserve bench-transport`: how fast a tensor message crosses from one OS process to another,
// over CAF's middleman (loopback TCP, as kv_pages with their raw-blob inspect) and over UCX (tag
// messages of the same floats, once per --ucx-tls: shared memory, TCP): per size, the latency of
// one message and its acknowledgement (median and minimum of --iters), and the throughput of
// --window messages in flight. The peer is this binary run again as `bench-transport --serve`
// (or `--serve-ucx`), a child that ends when its parent does (its stdin closes); it acknowledges
// each message with a checksum of the bytes it received, checked here.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "actors/kernel_inspect.hpp"
#include "actors/system_config.hpp"
#include "tools/commands.hpp"
#include "tools/transport_ucx.hpp"

namespace moe::tools {
namespace {

using clock = std::chrono::steady_clock;

// 32 KiB: the small preset's decode dispatch to one rank (8 tokens x hidden 1024 x fp32).
// 1 and 16 MiB: the KV of ~200 and ~3300 tokens of it (8 layers x (128 + 32) x fp32 per token).
struct transport_options {
  std::vector<int64_t> sizes{4096, 32768, 65536, 1 << 20, 16 << 20};  // bytes of floats per message
  int64_t iters = 50;
  int64_t window = 8;
  std::string engine = "both";                    // middleman, ucx, both
  std::vector<std::string> ucx_tls{"sm", "tcp"};  // one UCX run per UCX_TLS value
  bool serve = false;                             // the middleman peer
  bool serve_ucx = false;                         // the UCX peer (of ucx_tls.front())
};

// A position-weighted sum of the 64-bit words (fast enough not to be what is timed): what the
// peer says it received.
uint64_t checksum(std::span<const std::byte> data) {
  const size_t bytes = data.size();
  uint64_t h = bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, data.data() + i, 8);
    h += w * (2 * i + 1);
  }
  for (; i < bytes; ++i)
    h += static_cast<uint64_t>(data[i]) * (2 * i + 1);
  return h;
}

uint64_t checksum(const kv_pages& p) { return checksum(std::as_bytes(std::span{p.data})); }

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

std::string read_line(int fd) {
  std::string line;
  char ch = 0;
  while (read(fd, &ch, 1) == 1 && ch != '\n')
    line += ch;
  return line;
}

// The parent is gone once the peer's stdin is at its end (or has more to say than it ever does).
bool parent_alive() {
  pollfd in{.fd = 0, .events = POLLIN, .revents = 0};
  return poll(&in, 1, 0) == 0;
}

// The UCX peer: prints its worker's address, connects to the one that comes back on stdin, and
// acknowledges every data message until stop (or its stdin closes).
void serve_ucx_peer(const std::string& tls) {
  ucx_link link{tls};
  std::printf("ucx address %s\n", link.address().c_str());
  std::fflush(stdout);
  link.connect(read_line(0));
  std::vector<std::byte> data;
  while (link.wait_data(data, parent_alive))
    link.send_ack(checksum(data));
}

// This binary as `bench-transport <args>`, its stdin and stdout piped here; `hello` is the first
// line it printed.
struct peer_process {
  pid_t pid = -1;
  int to_child = -1;
  std::string hello;

  explicit peer_process(std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("moeserve"), const_cast<char*>("bench-transport")};
    for (std::string& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
      throw std::runtime_error("bench-transport: pipe failed");
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child = in[1];
    hello = read_line(out[0]);
    close(out[0]);
  }
  // The peer's first line without `prefix`; throws if it printed something else.
  std::string expect(const std::string& prefix) {
    if (hello.rfind(prefix, 0) != 0) {
      stop();
      throw std::runtime_error("bench-transport: the peer process did not start (\"" + hello + "\")");
    }
    return hello.substr(prefix.size());
  }
  void tell(const std::string& line) {
    const std::string text = line + "\n";
    if (write(to_child, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      throw std::runtime_error("bench-transport: cannot write to the peer process");
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

double us_since(clock::time_point t) {
  return std::chrono::duration<double, std::micro>(clock::now() - t).count();
}

void print_header(const transport_options& o, const std::string& engine) {
  std::printf("%s\n%12s %12s %12s %18s\n", engine.c_str(), "bytes", "p50 us", "min us",
              ("MB/s, " + std::to_string(o.window) + " in flight").c_str());
}

// Prints one row for messages of `pages`: `send()` starts one, `wait_ack()` returns the peer's
// checksum of the oldest one not yet acknowledged (checked against the one sent). First untimed
// ones, for 50 ms and at least --window (a transport connects lazily, and the scheduler has yet to
// spread two busy processes over two CPUs); then --iters timed one at a time (latency); then
// --window in flight until at least max(--iters, --window) and 50 ms have passed (throughput).
template <class Send, class WaitAck>
void measure(const transport_options& o, const kv_pages& pages, Send send, WaitAck wait_ack) {
  const uint64_t want = checksum(pages);
  const auto acked = [&] {
    if (wait_ack() != want)
      throw std::runtime_error("bench-transport: the peer received other bytes than were sent");
  };
  const auto warm_up_start = clock::now();
  for (int64_t i = 0; i < o.window || us_since(warm_up_start) < 50'000; ++i) {
    send();
    acked();
  }
  std::vector<double> lat;
  for (int64_t i = 0; i < o.iters; ++i) {
    const auto t = clock::now();
    send();
    acked();
    lat.push_back(us_since(t));
  }
  std::sort(lat.begin(), lat.end());
  const auto t = clock::now();
  const int64_t min_sent = std::max<int64_t>(o.iters, o.window);
  int64_t sent = 0;
  for (; sent < o.window; ++sent)
    send();
  for (int64_t in_flight = sent; in_flight > 0; --in_flight) {
    acked();
    if (sent < min_sent || us_since(t) < 50'000) {
      send();
      ++sent;
      ++in_flight;
    }
  }
  const double bytes = static_cast<double>(pages.data.size() * sizeof(float));
  const double mb_s = static_cast<double>(sent) * bytes / us_since(t);
  std::printf("%12.0f %12.1f %12.1f %18.1f\n", bytes, lat[lat.size() / 2], lat.front(), mb_s);
  std::fflush(stdout);
}

void run_middleman(const transport_options& o) {
  peer_process peer{{"--serve"}};
  const std::string address = peer.expect("listening on ");
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto remote = sys.middleman().remote_actor("127.0.0.1", port);
  if (!remote)
    throw std::runtime_error("bench-transport: cannot reach the peer: " + sys.render(remote.error()));
  caf::scoped_actor self{sys};
  print_header(o, "middleman (CAF 0.17, loopback TCP): kv_pages, raw blob");
  for (const int64_t size : o.sizes) {
    const kv_pages pages = pages_of(size);
    const caf::message msg = caf::make_message(pages);
    measure(
      o, pages, [&] { self->send(*remote, msg); },
      [&] {
        uint64_t got = 0;
        self->receive([&](uint64_t ack) { got = ack; },
                      caf::after(std::chrono::seconds(60)) >>
                        [] { throw std::runtime_error("bench-transport: no acknowledgement within 60 s"); });
        return got;
      });
  }
}

void run_ucx(const transport_options& o, const std::string& tls) {
  peer_process peer{{"--serve-ucx", "--ucx-tls", tls}};
  const std::string peer_address = peer.expect("ucx address ");
  ucx_link link{tls};
  link.connect(peer_address);
  peer.tell(link.address());
  print_header(o, "ucx " + ucx_version() + " (UCX_TLS=" + tls + ": " + link.transports() + "): tag messages");
  for (const int64_t size : o.sizes) {
    const kv_pages pages = pages_of(size);
    const auto bytes = std::as_bytes(std::span{pages.data});
    measure(
      o, pages, [&] { link.send_data(bytes); }, [&] { return link.wait_ack(); });
    link.flush();
  }
  link.send_stop();
}

void run_transport(const transport_options& o) {
  if (o.serve)
    return serve_peer();
  if (o.serve_ucx)
    return serve_ucx_peer(o.ucx_tls.front());
  const std::string no_ucx = "this moeserve was built without UCX (Debian's libucx-dev was not found when "
                             "cmake ran; tools/setup.sh installs it)";
  if (o.engine == "ucx" && !ucx_built())
    throw input_error("bench-transport --engine ucx: " + no_ucx);
  std::printf("2 processes; every message acknowledged with a checksum of the bytes received, checked\n");
  if (o.engine != "ucx")
    run_middleman(o);
  if (o.engine == "middleman")
    return;
  if (!ucx_built()) {
    std::printf("ucx: not measured: %s\n", no_ucx.c_str());
    return;
  }
  for (const std::string& tls : o.ucx_tls)
    run_ucx(o, tls);
}

}  // namespace

void add_bench_transport(CLI::App& app) {
  auto opts = std::make_shared<transport_options>();
  CLI::App* cmd = app.add_subcommand(
    "bench-transport", "Time tensor messages between two processes over CAF's middleman and UCX (loopback)");
  cmd->add_option("--sizes", opts->sizes, "Message sizes in bytes")->capture_default_str()->delimiter(',');
  cmd->add_option("--iters", opts->iters, "Messages timed one at a time per size")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  cmd->add_option("--window", opts->window, "Messages in flight for the throughput")
    ->capture_default_str()
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--engine", opts->engine, "Which transports: middleman, ucx or both")
    ->capture_default_str()
    ->check(CLI::IsMember({"middleman", "ucx", "both"}));
  cmd
    ->add_option("--ucx-tls", opts->ucx_tls,
                 "UCX transports, one run per value as UCX_TLS takes it (sm: shared memory, tcp)")
    ->capture_default_str();
  cmd->add_flag("--serve", opts->serve, "Run as the peer (started by bench-transport itself)")->group("");
  cmd->add_flag("--serve-ucx", opts->serve_ucx, "Run as the UCX peer (started by bench-transport itself)")
    ->group("");
  cmd->callback([opts] {
    for (const int64_t s : opts->sizes)
      if (s < 4 || s > (int64_t{1} << 30))
        throw input_error("--sizes: each size must be in 4..2^30 bytes, got " + std::to_string(s));
    run_transport(*opts);
  });
}

}  // namespace moe::tools
