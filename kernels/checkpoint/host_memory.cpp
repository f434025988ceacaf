// kernels/checkpoint/host_memory.cpp
#include "kernels/checkpoint/host_memory.hpp"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "config/model_config.hpp"

namespace moe {

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view key = "MemAvailable:";
  for (size_t line = 0; line < meminfo.size();) {
    const size_t end = std::min(meminfo.find('\n', line), meminfo.size());
    std::string_view text = meminfo.substr(line, end - line);
    line = end + 1;
    if (!text.starts_with(key))
      continue;
    text.remove_prefix(key.size());
    while (!text.empty() && text.front() == ' ')
      text.remove_prefix(1);
    uint64_t kib = 0;
    const auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), kib);
    if (ec != std::errc() || std::string_view(rest, text.data() + text.size()) != " kB")
      return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> available_memory() {
  std::ifstream file("/proc/meminfo");
  if (!file)
    return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return parse_mem_available(text.str());
}

void require_memory(uint64_t bytes, std::string_view what, std::string_view advice,
                    std::optional<uint64_t> available) {
  if (!available || bytes <= *available)
    return;
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, " would take %.2f GB of memory, but %.2f GB is available",
                static_cast<double>(bytes) * 1e-9, static_cast<double>(*available) * 1e-9);
  throw input_error(std::string(what) + numbers + " (MemAvailable in /proc/meminfo)" + std::string(advice));
}

}  // namespace moe
