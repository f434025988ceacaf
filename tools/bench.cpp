// tools/bench.cpp
// `moeserve bench`: a serving load generator like `vllm bench serve`. Streams generates to a
// running `moeserve serve` at a fixed concurrency or a Poisson request rate, prints progress on
// stderr and the "Serving Benchmark Result" report on stdout, optionally as JSON too.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

#include "config/model_config.hpp"
#include "tools/bench_runner.hpp"
#include "tools/cli_checks.hpp"
#include "tools/commands.hpp"

namespace moe::tools {

namespace {

constexpr int64_t max_default_connections = 64;
constexpr int plain_progress_every_s = 5;  // when stderr is not a terminal

struct bench_options {
  bench_config cfg;
  int64_t num_prompts = 64;
  double duration_s = 0.0;
  int64_t concurrency = 8;
  double request_rate = std::numeric_limits<double>::infinity();
  int64_t max_concurrency = 0;
  int64_t num_connections = 0;
  std::string prompt;
  std::string json_file;
  std::string base_url = "http://127.0.0.1:8766/v1";
};

/// "http://HOST:PORT/PATH" (PORT 80 when not given, PATH /v1 when empty) into the config.
void set_base_url(const std::string& url, bench_config& cfg) {
  constexpr std::string_view scheme = "http://";
  if (!url.starts_with(scheme))
    throw input_error("--base-url: expected http://HOST:PORT/PATH, got \"" + url +
                      "\" (https is not supported)");
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/')
    path.pop_back();
  cfg.base_path = path.empty() ? "/v1" : path;
  const size_t colon = authority.rfind(':');
  cfg.host = authority.substr(0, colon);
  if (cfg.host.empty())
    throw input_error("--base-url: no host in \"" + url + "\"");
  if (colon == std::string::npos) {
    cfg.port = 80;
    return;
  }
  char* end = nullptr;
  const std::string port = authority.substr(colon + 1);
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535)
    throw input_error("--base-url: expected a port in 1..65535, got \"" + port + "\"");
  cfg.port = static_cast<uint16_t>(p);
}

/// A request rate: a positive number of requests per second, or inf.
const CLI::Validator request_rate_check(
  [](std::string& text) -> std::string {
    char* end = nullptr;
    const double rate = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(rate > 0.0))
      return "expected requests per second > 0, or inf; got " + text;
    return {};
  },
  "RATE|inf");

/// A length range ratio: 0 <= r < 1.
const CLI::Validator range_ratio_check(
  [](std::string& text) -> std::string {
    char* end = nullptr;
    const double ratio = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(ratio >= 0.0 && ratio < 1.0))
      return "expected 0 <= r < 1; got " + text;
    return {};
  },
  "0<=r<1");

/// The run's settings from the flags given (the rules --help states).
bench_config resolve(const CLI::App& cmd, bench_options& o) {
  bench_config cfg = o.cfg;
  if (cfg.backend == "openai") {
    if (cmd.count("--host") > 0 || cmd.count("--port") > 0)
      throw input_error("--host/--port: the openai backend takes --base-url");
    set_base_url(o.base_url, cfg);
  } else if (cmd.count("--base-url") > 0) {
    throw input_error("--base-url: needs --backend openai (moeserve's wire takes --host and --port)");
  } else if (cmd.count("--vocab-size") > 0) {
    throw input_error("--vocab-size: needs --backend openai (moeserve's models answer says it)");
  }
  const bool by_rate = cmd.count("--request-rate") > 0;
  cfg.request_rate = by_rate ? o.request_rate : std::numeric_limits<double>::infinity();
  if (!by_rate)
    cfg.max_concurrency = o.concurrency;
  else if (cmd.count("--max-concurrency") > 0)
    cfg.max_concurrency = o.max_concurrency;
  if (cmd.count("--duration") > 0) {
    cfg.duration_s = o.duration_s;
    cfg.num_prompts = cmd.count("--num-prompts") > 0 ? std::optional(o.num_prompts) : std::nullopt;
    if (!cfg.num_prompts && std::isinf(cfg.request_rate) && !cfg.max_concurrency)
      throw input_error(
        "--duration without --num-prompts needs a finite --request-rate or --max-concurrency");
  } else {
    cfg.num_prompts = o.num_prompts;
  }
  if (cmd.count("--prompt") > 0)
    cfg.shape.prompt = o.prompt;
  cfg.num_connections =
    o.num_connections > 0
      ? o.num_connections
      : std::min({cfg.max_concurrency.value_or(max_default_connections),
                  cfg.num_prompts.value_or(max_default_connections), max_default_connections});
  return cfg;
}

/// Progress on stderr: one line rewritten with \r on a terminal, else a line every few seconds.
class progress_line {
 public:
  explicit progress_line(std::optional<int64_t> total) : total_(total), tty_(isatty(STDERR_FILENO) == 1) {}
  ~progress_line() {
    if (tty_ && shown_)
      std::fputc('\n', stderr);
  }
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  void show(const bench_progress& p) {
    const auto second = static_cast<int64_t>(p.elapsed_s);
    if (!tty_ && !p.finished && second / plain_progress_every_s == last_plain_ / plain_progress_every_s)
      return;
    last_plain_ = second;
    const std::string total = total_ ? std::to_string(*total_) : "?";
    std::fprintf(stderr, "%s%lld/%s done, %lld failed, %lld rejected, %lld in flight, %.0f s%s",
                 tty_ ? "\r" : "", static_cast<long long>(p.completed + p.failed), total.c_str(),
                 static_cast<long long>(p.failed), static_cast<long long>(p.rejected),
                 static_cast<long long>(p.in_flight), p.elapsed_s, tty_ ? "   " : "\n");
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  std::optional<int64_t> total_;
  bool tty_;
  bool shown_ = false;
  int64_t last_plain_ = 0;
};

void run(const CLI::App& cmd, bench_options& o) {
  const bench_config cfg = resolve(cmd, o);
  const std::string cap = cfg.max_concurrency ? std::to_string(*cfg.max_concurrency) : "none";
  const std::string where = cfg.backend == "openai" ? "http://" + cfg.host + ":" + std::to_string(cfg.port) +
                                                        cfg.base_path + " (openai)"
                                                    : cfg.host + ":" + std::to_string(cfg.port);
  std::fprintf(stderr, "bench: %s, request rate %g, max concurrency %s, %lld connections\n", where.c_str(),
               cfg.request_rate, cap.c_str(), static_cast<long long>(cfg.num_connections));
  std::ofstream json_out;  // opened first: a bad path fails before the run, not after
  if (!o.json_file.empty()) {
    json_out.open(o.json_file);
    if (!json_out)
      throw input_error("--json: cannot write " + o.json_file);
  }
  bench_run result;
  {
    progress_line progress(cfg.num_prompts);
    result = run_bench(cfg, [&progress](const bench_progress& p) { progress.show(p); });
  }
  const bench_metrics metrics = compute_metrics(result.records, result.duration_s);
  const run_settings settings{.request_rate = cfg.request_rate,
                              .max_concurrency = cfg.max_concurrency,
                              .shape = cfg.shape,
                              .seed = cfg.seed};
  std::printf("Model: %s (vocab %lld, context %lld)\n", result.model.id.c_str(),
              static_cast<long long>(result.model.vocab_size),
              static_cast<long long>(result.model.max_context));
  std::fputs(format_errors(metrics).c_str(), stdout);
  std::fputs(format_report(metrics, settings).c_str(), stdout);
  std::fflush(stdout);
  if (json_out.is_open()) {
    json_out << metrics_json(metrics, settings, result.records);
    json_out.close();
    if (!json_out)
      throw input_error("--json: cannot write " + o.json_file);
  }
  if (metrics.completed == 0 && !result.records.empty())  // nothing measured: fail scripts that use it
    throw std::runtime_error("bench: none of the " + std::to_string(result.records.size()) +
                             " requests completed (their errors are listed above)");
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  CLI::App* cmd = app.add_subcommand(
    "bench", "load a running `moeserve serve` and report TTFT, TPOT, ITL (like `vllm bench serve`)");
  cmd->footer("Load: --concurrency N keeps N requests in flight (the default, 8); --request-rate R sends\n"
              "Poisson arrivals at R req/s (inf: all at once), at most --max-concurrency in flight.\n"
              "Each request streams a generate of random token ids (or --prompt) with max_tokens = the\n"
              "drawn output length and ignore_eos, greedy. Lengths are uniform in\n"
              "[len * (1 - r), len * (1 + r)] for --range-ratio r, as vLLM's random dataset.\n"
              "ITL counts one gap per token: a notification carrying k tokens adds its gap, then k - 1\n"
              "zeros (vLLM counts one gap per chunk), so a request's gaps add up to its decode time.\n"
              "Rejected: requests answered with error code 429 (overloaded), also counted as failed.\n"
              "Migrated: results carrying `migrated: true`; the server does not send that key yet,\n"
              "so it is 0 today.\n"
              "--backend openai: one request per connection at a time (the connections cap the\n"
              "concurrency); ITL one gap per SSE chunk with text; output tokens from the usage chunk\n"
              "(stream_options.include_usage), else the chunks; --duration cancels by closing.");
  cmd
    ->add_option("--backend", o->cfg.backend,
                 "moeserve: MessagePack-RPC (--host, --port); openai: streamed /v1/completions of any "
                 "OpenAI-compatible server (--base-url), moeserve's HTTP front, llama-server or vLLM "
                 "(default moeserve)")
    ->check(CLI::IsMember({"moeserve", "openai"}));
  cmd->add_option("--base-url", o->base_url,
                  "openai: the API's root (default http://127.0.0.1:8766/v1, moeserve's HTTP front)");
  cmd
    ->add_option("--vocab-size", o->cfg.vocab_size,
                 "openai: draw prompt ids below this when the server's /v1/models does not say its "
                 "vocabulary (vLLM's does not)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd->add_option("--host", o->cfg.host, "server address (default 127.0.0.1)");
  cmd->add_option("--port", o->cfg.port, "server port (default 8765)")->check(CLI::Range(1, 65535));
  cmd
    ->add_option("--num-prompts", o->num_prompts,
                 "requests to send (default 64; unbounded with --duration alone)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd
    ->add_option("--duration", o->duration_s,
                 "seconds to issue requests for; the ones still running get --grace-period more, "
                 "then are cancelled and counted as failed")
    ->check(CLI::Range(0.001, 1e7));
  cmd
    ->add_option("--grace-period", o->cfg.grace_s,
                 "seconds to wait for in-flight requests after --duration (default 10)")
    ->check(CLI::Range(0.0, 1e7))
    ->needs("--duration");
  auto* concurrency =
    cmd->add_option("--concurrency", o->concurrency, "requests in flight, all the time (default 8)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  auto* rate = cmd
                 ->add_option("--request-rate", o->request_rate,
                              "requests per second, Poisson arrivals; inf: all at once")
                 ->check(request_rate_check)
                 ->excludes(concurrency);
  cmd
    ->add_option("--max-concurrency", o->max_concurrency,
                 "with --request-rate: requests in flight at most (default: no cap)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
    ->needs(rate);
  cmd
    ->add_option("--connections", o->num_connections,
                 "TCP connections; a request goes to the one with fewest in flight "
                 "(default: the concurrency, the number of prompts or 64, the least)")
    ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  auto* input_len = cmd->add_option("--input-len", o->cfg.shape.input_len, "prompt tokens (default 128)")
                      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--output-len", o->cfg.shape.output_len, "generated tokens, max_tokens (default 64)")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd
    ->add_option("--range-ratio", o->cfg.shape.range_ratio,
                 "lengths uniform in [len * (1 - r), len * (1 + r)] (default 0)")
    ->check(range_ratio_check);
  cmd->add_option("--prompt", o->prompt, "send this text as every prompt instead of random token ids")
    ->excludes(input_len);
  cmd
    ->add_option("--api-key", o->cfg.api_key,
                 "authenticate every connection with this key first; env MOESERVE_API_KEY")
    ->envname("MOESERVE_API_KEY");
  cmd->add_option("--seed", o->cfg.seed, "random prompts, lengths and arrivals (default 0)")
    ->check(non_negative_integer);
  cmd->add_option("--json", o->json_file, "also write the numbers, per request too, as JSON to FILE");
  cmd->callback([cmd, o] { run(*cmd, *o); });
}

}  // namespace moe::tools
