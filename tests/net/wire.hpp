// tests/net/wire.hpp
// MessagePack bytes and values for the net tests, built with msgpack-c alone (independent of
// the decoder under test).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <msgpack.hpp>

namespace moe::testing {

using packer = msgpack::packer<msgpack::sbuffer>;

/// The bytes `fill` packs.
template <class Fill>
std::string packed(Fill&& fill) {
  msgpack::sbuffer buf;
  packer pk(buf);
  fill(pk);
  return std::string(buf.data(), buf.size());
}

inline std::string bytes_of(const msgpack::sbuffer& buf) { return {buf.data(), buf.size()}; }

/// [0, msgid, method, params]
template <class Params>
std::string request_bytes(uint32_t msgid, std::string_view method, const Params& params) {
  return packed([&](packer& pk) { pk.pack_array(4).pack(0).pack(msgid).pack(method).pack(params); });
}

/// [2, method, params]
template <class Params>
std::string notification_bytes(std::string_view method, const Params& params) {
  return packed([&](packer& pk) { pk.pack_array(3).pack(2).pack(method).pack(params); });
}

/// One whole msgpack value from `bytes` (throws if there is more or less than one).
/// [0, msgid, "generate", [{input_ids, max_tokens, temperature: 0, ignore_eos: true, stream: true}]]
inline std::string streamed_generate(uint32_t msgid, const std::vector<int32_t>& ids, int32_t max_tokens) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(5);
    pk.pack("input_ids").pack(ids).pack("max_tokens").pack(max_tokens);
    pk.pack("temperature").pack(0).pack("ignore_eos").pack(true).pack("stream").pack(true);
  });
}

/// [0, msgid, "admin.kill", [{kind, index}]]
inline std::string kill_bytes(uint32_t msgid, const std::string& kind, int64_t index) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("admin.kill").pack_array(1).pack_map(2);
    pk.pack("kind").pack(kind).pack("index").pack(index);
  });
}

inline msgpack::object_handle unpack_one(const std::string& bytes) {
  size_t offset = 0;
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size(), offset);
  if (offset != bytes.size())
    throw std::runtime_error("trailing bytes after one value");
  return oh;
}

/// Builds generate's params [ {key: value, ...} ], keys in the order added.
class params_builder {
 public:
  template <class T>
  params_builder& add(std::string key, T value) {
    entries_.push_back([key = std::move(key), value](packer& pk) { pk.pack(key).pack(value); });
    return *this;
  }
  params_builder& add_nil(std::string key) {
    entries_.push_back([key = std::move(key)](packer& pk) { pk.pack(key).pack_nil(); });
    return *this;
  }
  /// A key whose value `fill` packs (exactly one value).
  params_builder& add_raw(std::string key, std::function<void(packer&)> fill) {
    entries_.push_back([key = std::move(key), fill](packer& pk) {
      pk.pack(key);
      fill(pk);
    });
    return *this;
  }
  [[nodiscard]] msgpack::object_handle build() const {
    return unpack_one(packed([&](packer& pk) {
      pk.pack_array(1).pack_map(static_cast<uint32_t>(entries_.size()));
      for (const auto& entry : entries_)
        entry(pk);
    }));
  }

 private:
  std::vector<std::function<void(packer&)>> entries_;
};

}  // namespace moe::testing
