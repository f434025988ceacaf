// tools/bench_tokenizer.cpp
// `moeserve bench-tokenizer`: single-thread encode throughput on a corpus generated in code
// (English prose, C++/Python code, Chinese, numbers, a multilingual mix), per category. MB/s is
// by wall clock and, in "cpu MB/s", by this thread's CPU time (steadier on a busy machine).
#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "kernels/tokenizer/tokenizer.hpp"
#include "tools/commands.hpp"

namespace moe::tools {
namespace {

using rng = std::mt19937_64;

template <size_t N>
const char* pick(rng& gen, const std::array<const char*, N>& items) {
  return items[gen() % N];
}

constexpr std::array<const char*, 64> english_words = {
  "the",         "of",        "and",        "to",         "in",          "is",          "that",
  "for",         "it",        "as",         "was",        "with",        "be",          "by",
  "on",          "not",       "he",         "this",       "are",         "or",          "his",
  "from",        "at",        "which",      "but",        "have",        "an",          "they",
  "you",         "were",      "their",      "one",        "all",         "we",          "can",
  "her",         "has",       "there",      "been",       "if",          "more",        "when",
  "will",        "would",     "who",        "so",         "model",       "network",     "experts",
  "token",       "serving",   "throughput", "latency",    "distributed", "memory",      "attention",
  "request",     "scheduler", "however",    "government", "information", "development", "understanding",
  "nevertheless"};

constexpr std::array<const char*, 16> code_lines = {"for (int i = 0; i < n; ++i) {",
                                                    "  sum += a[i] * b[i];",
                                                    "}",
                                                    "def forward(self, x):",
                                                    "    return self.proj(torch.relu(x)) + x",
                                                    "if (ptr == nullptr) return std::nullopt;",
                                                    "    for key, value in items.items():",
                                                    "        counts[key] = counts.get(key, 0) + 1",
                                                    "std::vector<int32_t> ids;",
                                                    "\tconst auto it = table.find(name);",
                                                    "#include <unordered_map>",
                                                    "    raise ValueError(f\"bad shape {x.shape}\")",
                                                    "auto [begin, end] = range(0x1F, 42);",
                                                    "  // NOTE: free the KV blocks once",
                                                    "class Router(nn.Module):",
                                                    "return {ok, 0};"};

constexpr std::array<const char*, 24> chinese_phrases = {"深度学习", "模型",   "推理",   "服务",  "专家",
                                                         "混合",     "注意力", "机制",   "我们",  "提出",
                                                         "一种",     "新的",   "方法",   "可以",  "显著",
                                                         "提高",     "吞吐量", "并且",   "降低",  "延迟",
                                                         "在",       "大规模", "分布式", "系统中"};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

std::string english(rng& gen, size_t bytes) {
  std::string text;
  while (text.size() < bytes) {
    const size_t num_words = 8 + gen() % 16;
    for (size_t w = 0; w < num_words; ++w) {
      std::string word = pick(gen, english_words);
      if (w == 0)
        word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      text += w + 1 == num_words ? ". " : (gen() % 10 == 0 ? ", " : " ");
    }
    if (gen() % 5 == 0)
      text += "\n\n";
  }
  return text;
}

std::string code(rng& gen, size_t bytes) {
  std::string text;
  while (text.size() < bytes) {
    text.append(2 * (gen() % 4), ' ');
    text += pick(gen, code_lines);
    text += gen() % 6 == 0 ? "\n\n" : "\n";
  }
  return text;
}

std::string chinese(rng& gen, size_t bytes) {
  std::string text;
  while (text.size() < bytes) {
    text += pick(gen, chinese_phrases);
    const auto r = gen() % 12;
    text += r == 0 ? "，" : r == 1 ? "。" : r == 2 ? "\n" : "";
  }
  return text;
}

std::string numbers(rng& gen, size_t bytes) {
  std::string text;
  char buf[64];
  while (text.size() < bytes) {
    switch (gen() % 4) {
      case 0:
        std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(gen() % 100000000));
        break;
      case 1: std::snprintf(buf, sizeof buf, "%.5f", static_cast<double>(gen() % 1000000) / 997.0); break;
      case 2:
        std::snprintf(buf, sizeof buf, "%d,%03d,%03d", int(gen() % 999), int(gen() % 1000),
                      int(gen() % 1000));
        break;
      default:
        std::snprintf(buf, sizeof buf, "20%02d-%02d-%02d", int(gen() % 30), int(1 + gen() % 12),
                      int(1 + gen() % 28));
    }
    text += buf;
    text += gen() % 8 == 0 ? "\n" : " ";
  }
  return text;
}

std::string mixed(rng& gen, size_t bytes) {
  std::string text;
  while (text.size() < bytes) {
    switch (gen() % 4) {
      case 0: text += english(gen, 80); break;
      case 1: text += chinese(gen, 60); break;
      case 2: text += "Привет, мир! Καλημέρα. こんにちは 안녕하세요 🚀🔥 "; break;
      default: text += numbers(gen, 30);
    }
  }
  return text;
}

void run(const std::string& dir, double mb) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto tok = tokenizer::load(dir);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tokenizer %s loaded in %.2f s; %.1f MB per category, 1 thread\n", dir.c_str(), load_s, mb);
  std::printf("%-10s %8s %10s %8s %8s %12s %12s\n", "category", "MB", "tokens", "MB/s", "cpu MB/s",
              "tokens/s", "bytes/token");
  rng gen(42);
  const auto bytes = static_cast<size_t>(mb * 1e6);
  const std::array<std::pair<const char*, std::string (*)(rng&, size_t)>, 5> categories = {
    {{"english", english}, {"code", code}, {"chinese", chinese}, {"numbers", numbers}, {"mixed", mixed}}};
  double total_bytes = 0, total_tokens = 0, total_s = 0, total_cpu_s = 0;
  auto print_row = [](const char* name, double num_bytes, double num_tokens, double s, double cpu_s) {
    std::printf("%-10s %8.2f %10.0f %8.1f %8.1f %12.0f %12.2f\n", name, num_bytes / 1e6, num_tokens,
                num_bytes / 1e6 / s, num_bytes / 1e6 / cpu_s, num_tokens / s, num_bytes / num_tokens);
  };
  for (const auto& [name, make] : categories) {
    const std::string text = make(gen, bytes);
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    const auto num_tokens = static_cast<double>(tok->encode(text).size());
    const double cpu_s = thread_cpu_seconds() - cpu_start;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_row(name, double(text.size()), num_tokens, s, cpu_s);
    total_bytes += double(text.size());
    total_tokens += num_tokens;
    total_s += s;
    total_cpu_s += cpu_s;
  }
  print_row("all", total_bytes, total_tokens, total_s, total_cpu_s);
}

}  // namespace

void add_bench_tokenizer(CLI::App& app) {
  struct options {
    std::string dir = default_tokenizer_dir();
    double mb = 4;
  };
  auto opts = std::make_shared<options>();
  CLI::App* cmd = app.add_subcommand("bench-tokenizer", "single-thread encode throughput (MB/s)");
  auto* model =
    cmd->add_option("--model", opts->dir, "checkpoint directory holding tokenizer.json")->type_name("DIR");
  cmd->add_option("--tokenizer-dir", opts->dir, "directory holding tokenizer.json (default: set-up's)")
    ->type_name("DIR")
    ->excludes(model);
  cmd->add_option("--mb", opts->mb, "megabytes of text per category")->check(CLI::PositiveNumber);
  cmd->callback([opts] { run(opts->dir, opts->mb); });
}

}  // namespace moe::tools
