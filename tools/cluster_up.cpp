// tools/cluster_up.cpp
// `moeserve cluster up FILE --model DIR`: a one-machine try-out of a multi-process cluster. Starts
// `moeserve serve --cluster FILE --node NAME` for every node of the file whose host is this
// machine's loopback (printing how to start the others where they run), and stops them all on
// Ctrl-C or SIGTERM. A node with ranks that exits on its own (killed, or a rank of it died) is
// started again, as a service manager would, and the front joins it again; more than
// max_node_restarts within restart_window, or the front exiting, stops them all, and the exit
// status names the node.
#include <CLI/CLI.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "config/cluster_file.hpp"
#include "tools/commands.hpp"

extern char** environ;

namespace moe::tools {
namespace {

struct cluster_up_options {
  std::string file;
  std::string model_dir;
  bool reference = false;
};

struct started_node {
  std::string name;
  pid_t pid = 0;
  bool running = true;
  bool front = false;
  std::deque<std::chrono::steady_clock::time_point> restarts;  // within restart_window
};

constexpr int max_node_restarts = 5;
constexpr std::chrono::seconds restart_window{60};

std::string exit_text(int status) {
  return WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                           : "signal " + std::to_string(WTERMSIG(status));
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

pid_t spawn_node(const cluster_up_options& o, const std::string& node) {
  std::vector<std::string> args{"moeserve",  "serve", "--model", o.model_dir,
                                "--cluster", o.file,  "--node",  node};
  if (o.reference)
    args.emplace_back("--reference");
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the node gets the signals this process blocks
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (err != 0)
    throw input_error("cluster up: cannot start node " + node + ": " + std::strerror(err));
  return pid;
}

// Reaps the nodes that exited and starts the rank nodes among them again; the error that stops
// the cluster (the front exited, or a node past its restarts), or "".
std::string reap(const cluster_up_options& o, std::vector<started_node>& nodes) {
  for (started_node& n : nodes) {
    int status = 0;
    if (!n.running || waitpid(n.pid, &status, WNOHANG) != n.pid)
      continue;
    n.running = false;
    const std::string gone = "cluster up: node " + n.name + " exited (" + exit_text(status) + ")";
    if (n.front)
      return gone + ": the others were stopped";
    const auto now = std::chrono::steady_clock::now();
    while (!n.restarts.empty() && now - n.restarts.front() > restart_window)
      n.restarts.pop_front();
    if (static_cast<int>(n.restarts.size()) >= max_node_restarts)
      return gone + " for the " + std::to_string(max_node_restarts + 1) + "th time within " +
             std::to_string(restart_window.count()) + " s: the others were stopped";
    n.restarts.push_back(now);
    n.pid = spawn_node(o, n.name);
    n.running = true;
    std::printf("%s: started again (pid %d)\n", gone.c_str(), static_cast<int>(n.pid));
    std::fflush(stdout);
  }
  return "";
}

void stop_all(std::vector<started_node>& nodes) {
  for (const started_node& n : nodes)
    if (n.running)
      kill(n.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (started_node& n : nodes) {
    while (n.running) {
      int status = 0;
      if (waitpid(n.pid, &status, WNOHANG) == n.pid) {
        n.running = false;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "cluster up: node %s did not stop within 60 s: killed\n", n.name.c_str());
        kill(n.pid, SIGKILL);
        waitpid(n.pid, &status, 0);
        n.running = false;
        break;
      }
      usleep(20'000);
    }
  }
}

void run_cluster_up(const cluster_up_options& o) {
  const cluster_file c = load_cluster(o.file);
  validate_cluster_for_model(c, load_model_config(o.model_dir), o.file);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::vector<started_node> nodes;
  for (const cluster_node& n : c.nodes) {
    if (!is_loopback(n.host)) {
      std::printf("cluster up: node %s is on %s: start it there with `moeserve serve --cluster %s --node %s "
                  "--model %s`\n",
                  n.name.c_str(), n.host.c_str(), o.file.c_str(), n.name.c_str(), o.model_dir.c_str());
      continue;
    }
    try {
      nodes.push_back(
        {.name = n.name, .pid = spawn_node(o, n.name), .running = true, .front = n.front, .restarts = {}});
    } catch (...) {
      stop_all(nodes);
      throw;
    }
    std::printf("cluster up: started node %s (pid %d)\n", n.name.c_str(), static_cast<int>(nodes.back().pid));
  }
  std::fflush(stdout);
  for (;;) {
    const timespec tick{.tv_sec = 0, .tv_nsec = 200'000'000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("cluster up: stopping %zu nodes\n", nodes.size());
      std::fflush(stdout);
      stop_all(nodes);
      std::printf("cluster up: stopped\n");
      return;
    }
    if (const std::string stop = reap(o, nodes); !stop.empty()) {
      stop_all(nodes);
      throw input_error(stop);
    }
  }
}

}  // namespace

void add_cluster_up(CLI::App& cluster) {
  auto o = std::make_shared<cluster_up_options>();
  CLI::App* up = cluster.add_subcommand(
    "up", "Start every node of a cluster file that runs on this machine; stop them all on Ctrl-C");
  up->add_option("file", o->file, "The cluster file")->required()->check(CLI::ExistingFile);
  up->add_option("--model", o->model_dir, "The checkpoint directory every node serves")->required();
  up->add_flag("--reference", o->reference, "Run the plain-loop CPU reference backend on every rank");
  up->callback([o] { run_cluster_up(*o); });
}

}  // namespace moe::tools
