// net/generate_reply.cpp
#include "net/generate_reply.hpp"

#include <bit>

namespace moe::net {
namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

/// A float64 (0xcb) or float32 (0xca) even when integral: packer::pack_double writes 2.0 as the
/// integer 2, and a logprob of exactly 0 or -1 must stay a float.
template <class Float, class Bits>
void write_float(msgpack::sbuffer& out, Float value, char tag) {
  const auto bits = std::bit_cast<Bits>(value);
  char bytes[1 + sizeof(Bits)] = {tag};
  for (size_t i = 0; i < sizeof(Bits); ++i)
    bytes[1 + i] = static_cast<char>(bits >> (8 * (sizeof(Bits) - 1 - i)));
  out.write(bytes, sizeof bytes);
}

void write_float64(msgpack::sbuffer& out, double value) {
  write_float<double, uint64_t>(out, value, static_cast<char>(0xcb));
}
void write_float32(msgpack::sbuffer& out, float value) {
  write_float<float, uint32_t>(out, value, static_cast<char>(0xca));
}

/// [{token_id, logprob, top_logprobs: [[id, logprob], ...]}, ...]
void write_logprobs(msgpack::sbuffer& out, const std::vector<token_logprobs>& logprobs) {
  packer pk(out);
  pk.pack_array(static_cast<uint32_t>(logprobs.size()));
  for (const token_logprobs& t : logprobs) {
    pk.pack_map(3).pack("token_id").pack(t.token_id).pack("logprob");
    write_float32(out, t.logprob);
    pk.pack("top_logprobs").pack_array(static_cast<uint32_t>(t.top.size()));
    for (const logprob_entry& e : t.top) {
      pk.pack_array(2).pack(e.token_id);
      write_float32(out, e.logprob);
    }
  }
}

}  // namespace

msgpack::sbuffer encode_token(uint32_t msgid, uint64_t seq, const std::vector<int32_t>& token_ids,
                              std::string_view text_delta, const std::vector<token_logprobs>* logprobs) {
  msgpack::sbuffer out;
  packer pk(out);
  pk.pack_array(3).pack_uint8(2).pack("token");
  pk.pack_array(logprobs ? 5 : 4).pack_uint32(msgid).pack_uint64(seq).pack(token_ids).pack(text_delta);
  if (logprobs)
    write_logprobs(out, *logprobs);
  return out;
}

msgpack::sbuffer encode_generate_result(uint32_t msgid, const generate_result& r) {
  msgpack::sbuffer out;
  packer pk(out);
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil();
  pk.pack_map(r.logprobs ? 6 : 5);
  pk.pack("output_ids").pack(r.output_ids);
  pk.pack("text").pack(r.text);
  pk.pack("finish_reason").pack(to_string(r.reason));
  pk.pack("usage").pack_map(2);
  pk.pack("prompt_tokens").pack(r.usage.prompt_tokens);
  pk.pack("completion_tokens").pack(r.usage.completion_tokens);
  pk.pack("timings").pack_map(3);
  pk.pack("queue");
  write_float64(out, r.timings.queue);
  pk.pack("ttft");
  write_float64(out, r.timings.ttft);
  pk.pack("decode");
  write_float64(out, r.timings.decode);
  if (r.logprobs) {
    pk.pack("logprobs");
    write_logprobs(out, *r.logprobs);
  }
  return out;
}

}  // namespace moe::net
