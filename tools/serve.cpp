// tools/serve.cpp
// `moeserve serve`: loads a checkpoint, spawns the serving cluster from the topology flags and
// answers MessagePack-RPC on host:port and HTTP (OpenAI's API) on --http-port until SIGINT or SIGTERM, then drains (--shutdown-grace)
// and stops, exiting 0. Keys come
// from --api-key / --admin-key or, kept out of `ps`, MOESERVE_API_KEY / MOESERVE_ADMIN_KEY.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "actors/cluster.hpp"
#include "actors/system_config.hpp"
#include "config/cluster_file.hpp"
#include "config/thread_split.hpp"
#include "kernels/model/weights.hpp"
#include "net/rpc_server.hpp"
#include "net/server_log.hpp"
#include "tools/commands.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/lib/running_cluster.hpp"
#include "tools/lib/topology_options.hpp"
#include "tools/serve_node.hpp"

namespace moe::tools {

namespace {

struct serve_options {
  std::string model_dir;
  node_options node;  // --cluster FILE --node NAME: one process of a multi-process cluster
  topology_options topology;
  bool reference = false;
  weight_options weights;
  net::server_limits limits;
  net::auth_keys keys;
  double idle_timeout_s = 300.0, read_timeout_s = 30.0, keep_alive_timeout_s = 60.0;
  int64_t log_stats_interval_s = 10;  // 0: no stats lines
  bool fault_injection = false;
  double shutdown_grace_s = 30.0;  // for generates in flight at SIGTERM
};

const CLI::Validator non_empty_key(
  [](const std::string& key) { return key.empty() ? std::string("an empty key is no key") : std::string(); },
  "KEY");

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

/// Blocks until SIGINT or SIGTERM (blocked in every thread, so only this one sees them).
void wait_for_signal(const sigset_t& signals) {
  int signal = 0;
  sigwait(&signals, &signal);
}

void check_keys(const net::auth_keys& keys) {
  if (!keys.admin_key.empty() && keys.admin_key == keys.api_key)
    throw input_error("--admin-key: must differ from --api-key (a token grants one role)");
}

// Serves cluster `c` on `sys` over MessagePack-RPC and HTTP until SIGINT or SIGTERM, then
// drains and stops the server (the caller stops the cluster).
void serve_until_signal(caf::actor_system& sys, const cluster& c, const topology_config& topo,
                        std::shared_ptr<const tokenizer> tok, const model_config& model, serve_options& o,
                        const sigset_t& signals, const std::string& threads_line) {
  o.limits.idle_timeout = millis(o.idle_timeout_s);
  o.limits.read_timeout = millis(o.read_timeout_s);
  o.limits.keep_alive_timeout = millis(o.keep_alive_timeout_s);
  net::serving_target target{
    .handles = c,
    .tok = std::move(tok),
    .vocab_size = model.vocab_size,
    .max_context = static_cast<size_t>(served_context(topo, model.max_position_embeddings)),
    .model_name = std::filesystem::path(o.model_dir).lexically_normal().filename().string()};
  if (target.model_name.empty())
    target.model_name = std::filesystem::path(o.model_dir).parent_path().filename().string();
  std::optional<uint16_t> http_port;  // off at 0
  if (topo.http_port > 0)
    http_port = static_cast<uint16_t>(topo.http_port);
  else if (topo.http_port == -1)  // the port after --port; any free one after 0 or 65535
    http_port = static_cast<uint16_t>(topo.port == 0 || topo.port == 65535 ? 0 : topo.port + 1);
  net::rpc_server server(sys, target,
                         {.host = topo.host,
                          .port = static_cast<uint16_t>(topo.port),
                          .http_port = http_port,
                          .limits = o.limits,
                          .keys = o.keys,
                          .log_stats_interval = std::chrono::seconds(o.log_stats_interval_s),
                          .fault_injection = o.fault_injection});
  // the context served, which may be less than --max-context (the model's or a KV pool's limit)
  std::printf(
    "moeserve: listening on %s (model %s, %lld prefill + %lld decode ranks, context %zu tokens%s)\n",
    server.address().c_str(), target.model_name.c_str(), static_cast<long long>(topo.prefill_ranks),
    static_cast<long long>(topo.decode_ranks), target.max_context,
    o.keys.api_key.empty() ? "" : ", api key required");
  if (server.http_port() != 0)
    std::printf("moeserve: HTTP on http://%s:%u (OpenAI-compatible /v1, /health, /ready, /admin)\n",
                topo.host.c_str(), static_cast<unsigned>(server.http_port()));
  if (!threads_line.empty())
    std::printf("moeserve: threads: %s\n", threads_line.c_str());
  std::fflush(stdout);
  if (static_cast<int64_t>(target.max_context) < topo.max_context)  // vLLM refuses; we say so
    net::server_log().warn("serving a context of {} tokens, less than --max-context {}: the model's "
                           "max_position_embeddings is {}, one rank's KV pool {} ({} blocks x {})",
                           target.max_context, topo.max_context, model.max_position_embeddings,
                           topo.kv_blocks * topo.page_size, topo.kv_blocks, topo.page_size);
  wait_for_signal(signals);
  std::printf("moeserve: stopping: new generates get 503; those in flight have %.0f s to finish\n",
              o.shutdown_grace_s);
  std::fflush(stdout);
  if (const int64_t cut = server.drain(millis(o.shutdown_grace_s)); cut > 0)
    std::printf("moeserve: %lld generates did not finish in time and were answered 503\n",
                static_cast<long long>(cut));
  server.stop();
  std::printf("moeserve: stopped\n");
  std::fflush(stdout);
}

// The front node of a multi-process cluster: joins the nodes that run ranks, then serves as a
// one-process server does. --port and --http-port override the file's rpc_port and http_port.
void run_front(serve_options& o, const cluster_file& file, const cluster_node& front,
               const sigset_t& signals) {
  topology_config topo = file.topology;
  if (o.topology.port)
    topo.port = *o.topology.port;
  if (o.topology.http_port)
    topo.http_port = *o.topology.http_port;
  validate(topo);
  check_keys(o.keys);
  const model_config model = load_model_config(o.model_dir);
  validate_cluster_for_model(file, model, o.node.cluster_file);
  if (!std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json"))
    throw input_error(o.model_dir + "/tokenizer.json not found: the front node needs the model's tokenizer");
  const std::shared_ptr<const tokenizer> tok = tokenizer::load(o.model_dir);
  // Ctrl-C while the nodes are awaited (a connect to an absent host can block for minutes):
  // a thread takes the signal and ends the process, which holds nothing yet; SIGUSR1 (blocked
  // here before any other thread starts) ends that thread once every node has joined
  sigset_t joining = signals;
  sigaddset(&joining, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &joining, nullptr);
  std::thread stop_while_joining([joining] {
    int signal = 0;
    sigwait(&joining, &signal);
    if (signal == SIGUSR1)
      return;
    std::printf("moeserve: stopping before every node joined\n");
    std::fflush(stdout);
    std::_Exit(0);
  });
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  configure_remote(cfg, file.heartbeat_interval_s, file.connection_timeout_s);
  caf::actor_system sys{cfg};
  const cluster c = [&] {
    struct joined_or_not {  // on every way out of the join, the thread above ends
      std::thread& t;
      ~joined_or_not() {
        pthread_kill(t.native_handle(), SIGUSR1);
        t.join();
      }
    } done{stop_while_joining};
    return join_cluster(sys, file, front, model, tok);
  }();
  struct stop_on_exit {
    const cluster& c;
    ~stop_on_exit() { c.stop(); }
  } stop{c};
  serve_until_signal(sys, c, topo, tok, model, o, signals, "");  // the nodes print their own
}

void run(serve_options& o) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts
  if (!o.node.cluster_file.empty()) {
    const cluster_file file = load_cluster(o.node.cluster_file);
    const cluster_node& node = find_node(file, o.node.node);
    if (node.front)
      return run_front(o, file, node, signals);
    return run_cluster_node(o.node, o.model_dir, o.weights, o.reference, signals);
  }
  const topology_config topo = resolve_topology(o.topology);
  check_keys(o.keys);
  auto [weights, tok] = load_for_serving(o.model_dir, topo, o.weights, o.reference, "serve");
  running_cluster running(weights, tok, {.topology = topo, .reference = o.reference});
  const std::string threads = describe(detect_usable_cores(), threads_per_rank(topo)) +
                              (topo.threads_per_rank > 0 ? " (--threads-per-rank)" : "") +
                              (topo.pin_threads ? ", pinned to cores in rank order" : "");
  serve_until_signal(running.system(), running.handles(), topo, tok, weights->config, o, signals, threads);
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<serve_options>();
  CLI::App* cmd = app.add_subcommand("serve",
                                     "serve a model over MessagePack-RPC (TCP) and HTTP (OpenAI's API)");
  cmd
    ->add_option("--model", o->model_dir, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")
    ->required();
  add_topology_options(*cmd, o->topology, /*listen=*/true);
  cmd->add_flag("--reference", o->reference, "run the plain-loop CPU reference backend on every rank");
  CLI::Option* cluster =
    cmd
      ->add_option("--cluster", o->node.cluster_file,
                   "a cluster file (config/cluster.toml): run one node of a multi-process cluster")
      ->check(CLI::ExistingFile);
  cmd->add_option("--node", o->node.node, "with --cluster: which of the file's nodes this process is")
    ->needs(cluster);
  cluster->needs("--node");
  add_weight_options(*cmd, o->weights);
  auto& l = o->limits;
  cmd->add_option("--max-connections", l.max_connections, "open connections at most (default 256)")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd
    ->add_option("--max-in-flight", l.max_in_flight,
                 "generate requests in flight per connection (default 64)")
    ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd->add_flag("--fault-injection", o->fault_injection,
                "answer admin.actors and admin.kill on admin connections (--admin-key): list the "
                "supervised actors, crash one (for chaos tests; default off)");
  cmd
    ->add_option("--log-stats-interval", o->log_stats_interval_s,
                 "seconds between stats lines on stderr (throughput, KV in use) while serving; 0: none "
                 "(default 10)")
    ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  cmd
    ->add_option("--shutdown-grace", o->shutdown_grace_s,
                 "seconds generates in flight at SIGTERM or Ctrl-C have to finish before they are "
                 "answered 503 (new ones get 503 at once; default 30)")
    ->check(CLI::Range(0.0, 1e7));
  cmd
    ->add_option("--idle-timeout", o->idle_timeout_s,
                 "seconds a connection may sit with nothing in flight (default 300)")
    ->check(CLI::Range(0.001, 1e7));
  cmd
    ->add_option("--read-timeout", o->read_timeout_s,
                 "seconds a started message has to arrive whole (default 30)")
    ->check(CLI::Range(0.001, 1e7));
  cmd
    ->add_option("--max-write-buffer", l.max_write_buffer,
                 "unsent bytes per connection before it is dropped as too slow (default 16 MiB)")
    ->check(CLI::Range(size_t{1} << 12, size_t{1} << 34));
  cmd->add_option("--max-frame-bytes", l.frames.max_frame_bytes, "bytes of one message (default 2 MiB)")
    ->check(CLI::Range(size_t{64}, size_t{1} << 30));
  cmd
    ->add_option("--max-body-bytes", l.http.max_body_bytes, "HTTP: bytes of one request body (default 2 MiB)")
    ->check(CLI::Range(size_t{64}, size_t{1} << 30));
  cmd
    ->add_option("--max-header-bytes", l.http.max_head_bytes,
                 "HTTP: bytes of one request line and its headers (default 16 KiB)")
    ->check(CLI::Range(size_t{256}, size_t{1} << 24));
  cmd
    ->add_option("--keep-alive-timeout", o->keep_alive_timeout_s,
                 "HTTP: seconds a kept-alive connection may wait for its next request (default 60)")
    ->check(CLI::Range(0.001, 1e7));
  cmd
    ->add_option("--api-key", o->keys.api_key,
                 "clients must send `auth` with this key first (else 401); env MOESERVE_API_KEY")
    ->envname("MOESERVE_API_KEY")
    ->check(non_empty_key);
  cmd
    ->add_option("--admin-key", o->keys.admin_key,
                 "`auth` with this key makes a connection admin (client access too); env MOESERVE_ADMIN_KEY")
    ->envname("MOESERVE_ADMIN_KEY")
    ->check(non_empty_key);
  cmd
    ->add_option("--max-auth-failures", l.max_auth_failures,
                 "wrong auth tokens before a connection is closed (default 3)")
    ->check(CLI::Range(1, 1000));
  cmd
    ->add_option("--max-tokens-limit", l.requests.max_tokens,
                 "the largest max_tokens a request may ask for (default 32768)")
    ->check(CLI::Range(1, 1 << 24));
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
