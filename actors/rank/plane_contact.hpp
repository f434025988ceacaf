// actors/rank/plane_contact.hpp
// How a node's data plane (data_plane.hpp) is reached, as text that travels in the rosters:
// "<key>.<worker address>", both lower-case hex. The key is 128 random bits each plane draws at
// start; a payload that does not carry its receiver's is dropped, so only peers the token-gated
// control plane introduced can send one. Also: which network interface holds a node's address,
// so that the plane's network transports stay on it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

inline constexpr size_t plane_key_bytes = 16;
using plane_key = std::array<unsigned char, plane_key_bytes>;

/// A peer plane's contact: its key and its worker's address (UCX's opaque bytes).
struct plane_contact {
  plane_key key{};
  std::vector<unsigned char> worker;
};

/// `bytes` bytes at `data` as lower-case hex, two digits a byte.
[[nodiscard]] std::string to_hex(const void* data, size_t bytes);

/// The bytes lower-case hex text spells; empty for text that is empty, of an odd length or
/// not lower-case hex.
[[nodiscard]] std::vector<unsigned char> from_hex(std::string_view hex);

/// "<key hex>.<worker hex>".
[[nodiscard]] std::string contact_text(const plane_key& key, const void* worker, size_t worker_bytes);

/// The contact in `text`; nullopt unless it is a 32-digit key, a dot and a non-empty even count
/// of hex digits, all lower-case.
[[nodiscard]] std::optional<plane_contact> parse_contact(const std::string& text);

/// 128 bits from std::random_device.
[[nodiscard]] plane_key random_plane_key();

/// The name of the network interface that holds `host` (an address, or a name resolved to one:
/// "127.0.0.1" -> "lo"); empty when none does.
[[nodiscard]] std::string interface_of(const std::string& host);

}  // namespace moe
