// actors/rank/plane_contact.cpp
#include "actors/rank/plane_contact.hpp"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string_view>

namespace moe {

std::string to_hex(const void* data, size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::vector<unsigned char> from_hex(std::string_view hex) {
  if (hex.empty() || hex.size() % 2 != 0 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    return {};
  std::vector<unsigned char> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<unsigned char>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  return out;
}

std::string contact_text(const plane_key& key, const void* worker, size_t worker_bytes) {
  return to_hex(key.data(), key.size()) + "." + to_hex(worker, worker_bytes);
}

std::optional<plane_contact> parse_contact(const std::string& text) {
  const size_t dot = text.find('.');
  if (dot != 2 * plane_key_bytes)
    return std::nullopt;
  const std::vector<unsigned char> key = from_hex(std::string_view(text).substr(0, dot));
  plane_contact out{.key = {}, .worker = from_hex(std::string_view(text).substr(dot + 1))};
  if (key.size() != plane_key_bytes || out.worker.empty())
    return std::nullopt;
  std::copy(key.begin(), key.end(), out.key.begin());
  return out;
}

plane_key random_plane_key() {
  std::random_device entropy;
  plane_key key{};
  for (unsigned char& b : key)
    b = static_cast<unsigned char>(entropy());
  return key;
}

std::string interface_of(const std::string& host) {
  addrinfo hints{};
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* found = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
    return {};
  ifaddrs* interfaces = nullptr;
  std::string name;
  if (::getifaddrs(&interfaces) == 0) {
    for (const addrinfo* a = found; a != nullptr && name.empty(); a = a->ai_next)
      for (const ifaddrs* i = interfaces; i != nullptr && name.empty(); i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a->ai_family)
          continue;
        const bool same = a->ai_family == AF_INET
                            ? reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr ==
                                reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr
                            : a->ai_family == AF_INET6 &&
                                std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                                            &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                                            sizeof(in6_addr)) == 0;
        if (same)
          name = i->ifa_name;
      }
    ::freeifaddrs(interfaces);
  }
  ::freeaddrinfo(found);
  return name;
}

}  // namespace moe
