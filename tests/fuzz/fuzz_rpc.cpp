// tests/fuzz/fuzz_rpc.cpp
// libFuzzer target over the wire boundary: the frame decoder (bytes split at a fuzzer-chosen
// piece size) and, for every request it yields, its method's params validation (generate's
// whatever the method name, so that every frame reaches parse_generate). Besides ASan/UBSan findings it
// traps when a documented invariant breaks:
//   - a decode error that nobody is told about always closes the connection;
//   - nothing comes out of a decoder after it closed;
//   - the same bytes fed whole and fed in pieces give the same messages (unless a size limit
//     fired, which may fire earlier on pieces);
//   - every reply the server would send is one well-formed msgpack value.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "net/auth.hpp"
#include "net/generate_request.hpp"
#include "net/rpc_frame.hpp"
#include "net/rpc_methods.hpp"

using namespace moe::net;

namespace {

// Smaller than the defaults so the fuzzer reaches every limit quickly.
const frame_limits fuzz_frame_limits{.max_frame_bytes = 64 * 1024,
                                     .max_array_size = 4096,
                                     .max_map_size = 64,
                                     .max_str_bytes = 16 * 1024,
                                     .max_bin_bytes = 16 * 1024,
                                     .max_ext_bytes = 64,
                                     .max_depth = 8};
const auth_keys fuzz_keys{.api_key = "k", .admin_key = "admin"};
const request_limits fuzz_request_limits{.max_prompt_bytes = 4096,
                                         .max_messages = 8,
                                         .max_input_ids = 512,
                                         .max_tokens = 4096,
                                         .max_stop_strings = 4,
                                         .max_stop_string_bytes = 32,
                                         .max_stop_token_ids = 8};

void check(bool invariant) {
  if (!invariant)
    __builtin_trap();
}

void check_reply(const msgpack::sbuffer& reply) {
  size_t offset = 0;
  const msgpack::object_handle oh = msgpack::unpack(reply.data(), reply.size(), offset);
  check(offset == reply.size() && oh.get().type == msgpack::type::ARRAY);
}

/// A short signature of each message: its kind and msgid, for comparing two decodes.
std::vector<uint64_t> signature(const std::vector<rpc_message>& out, bool& limit_fired) {
  std::vector<uint64_t> sig;
  for (const rpc_message& m : out) {
    sig.push_back(m.index());
    if (const auto* req = std::get_if<rpc_request>(&m))
      sig.push_back(req->msgid);
    if (const auto* err = std::get_if<rpc_decode_error>(&m)) {
      limit_fired |= err->error.code == rpc_errc::too_large;
      sig.push_back(err->msgid.value_or(~uint32_t{0}));
      sig.push_back(err->close_connection);
    }
  }
  return sig;
}

template <class T>
void answer(uint32_t msgid, const std::variant<T, rpc_error>& result) {
  if (const auto* err = std::get_if<rpc_error>(&result))
    check_reply(encode_error(msgid, *err));
  else
    check_reply(encode_result(msgid, "ok"));
}

void validate_params(const rpc_request& req) {
  answer(req.msgid, parse_generate(req.params, fuzz_request_limits));
  switch (find_method(req.method).value_or(rpc_method::generate)) {
    case rpc_method::generate: break;
    case rpc_method::cancel: answer(req.msgid, parse_cancel(req.params)); break;
    case rpc_method::tokenize: answer(req.msgid, parse_tokenize(req.params, fuzz_request_limits)); break;
    case rpc_method::detokenize: answer(req.msgid, parse_detokenize(req.params, fuzz_request_limits)); break;
    case rpc_method::auth: {
      const auto token = parse_auth(req.params);
      if (const auto* t = std::get_if<std::string>(&token))
        check(role_for(fuzz_keys, *t) != auth_role::admin || *t == fuzz_keys.admin_key);
      answer(req.msgid, token);
      break;
    }
    default:
      if (const std::optional<rpc_error> err = check_no_params(req.params))
        check_reply(encode_error(req.msgid, *err));
  }
  if (!find_method(req.method))
    check_reply(encode_error(req.msgid, unknown_method(req.method)));
}

void exercise(rpc_message& m) {
  if (auto* req = std::get_if<rpc_request>(&m)) {
    validate_params(*req);
  } else if (auto* err = std::get_if<rpc_decode_error>(&m)) {
    check(err->close_connection || err->msgid || err->from_notification);
    if (std::optional<msgpack::sbuffer> reply = encode_reply(*err))
      check_reply(*reply);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  const size_t piece = 1 + data[0] % 64;  // the first byte picks how the stream is split
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  frame_decoder pieces(fuzz_frame_limits);
  std::vector<rpc_message> out;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    const size_t before = out.size();
    const bool was_closed = pieces.closed();
    pieces.feed(bytes.substr(i, piece), out);
    check(!was_closed || out.size() == before);
  }
  frame_decoder whole(fuzz_frame_limits);
  std::vector<rpc_message> whole_out = whole.feed(bytes);

  bool limit_fired = false;
  const std::vector<uint64_t> a = signature(out, limit_fired);
  const std::vector<uint64_t> b = signature(whole_out, limit_fired);
  check(limit_fired || a == b);
  for (rpc_message& m : out)
    exercise(m);
  return 0;
}
