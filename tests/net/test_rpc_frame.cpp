// tests/net/test_rpc_frame.cpp
// The MessagePack-RPC frame decoder: every frame kind, bytes in any pieces, limits enforced
// before allocation, and which malformed input is answered and which closes the connection.
#include <doctest/doctest.h>

#include <malloc.h>

#include <map>
#include <tuple>

#include "net/rpc_frame.hpp"
#include "wire.hpp"

using namespace moe::net;
using namespace moe::testing;

namespace {

rpc_decode_error only_error(std::vector<rpc_message> out) {
  REQUIRE(out.size() == 1);
  REQUIRE(std::holds_alternative<rpc_decode_error>(out[0]));
  return std::get<rpc_decode_error>(std::move(out[0]));
}

rpc_request only_request(std::vector<rpc_message> out) {
  REQUIRE(out.size() == 1);
  REQUIRE(std::holds_alternative<rpc_request>(out[0]));
  return std::get<rpc_request>(std::move(out[0]));
}

std::string params_text(const rpc_request& req) {
  REQUIRE(req.params.via.array.size == 1);
  return req.params.via.array.ptr[0].as<std::string>();
}

size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

}  // namespace

TEST_CASE("a request decodes with its msgid, method and params") {
  frame_decoder dec;
  const rpc_request req = only_request(dec.feed(request_bytes(42, "generate", std::tuple{"hi"})));
  CHECK(req.msgid == 42);
  CHECK(req.method == "generate");
  CHECK(params_text(req) == "hi");
  CHECK(dec.partial_bytes() == 0);
}

TEST_CASE("params stay valid after the message moves and the decoder is gone") {
  std::vector<rpc_message> out;
  {
    frame_decoder dec;
    dec.feed(request_bytes(1, "tokenize", std::tuple{std::string(1000, 'x')}), out);
    dec.feed(request_bytes(2, "tokenize", std::tuple{std::string(1000, 'y')}), out);
  }
  std::vector<rpc_message> moved = std::move(out);
  REQUIRE(moved.size() == 2);
  CHECK(params_text(std::get<rpc_request>(moved[0])) == std::string(1000, 'x'));
  CHECK(params_text(std::get<rpc_request>(moved[1])) == std::string(1000, 'y'));
}

TEST_CASE("a notification and a response decode") {
  frame_decoder dec;
  std::vector<rpc_message> out = dec.feed(notification_bytes("cancel", std::tuple{7u}));
  out.push_back(std::move(dec.feed(bytes_of(encode_result(9, std::string("ok"))))[0]));
  REQUIRE(out.size() == 2);
  const auto& note = std::get<rpc_notification>(out[0]);
  CHECK(note.method == "cancel");
  CHECK(note.params.via.array.ptr[0].as<uint32_t>() == 7);
  const auto& resp = std::get<rpc_response>(out[1]);
  CHECK(resp.msgid == 9);
  CHECK(resp.error.is_nil());
  CHECK(resp.result.as<std::string>() == "ok");
}

TEST_CASE("a request fed one byte at a time decodes once, on its last byte") {
  frame_decoder dec;
  const std::string bytes = request_bytes(3, "generate", std::tuple{std::string(300, 'a')});
  std::vector<rpc_message> out;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    dec.feed(bytes.substr(i, 1), out);
    REQUIRE(out.empty());
    CHECK(dec.partial_bytes() == i + 1);
  }
  dec.feed(bytes.substr(bytes.size() - 1), out);
  const rpc_request req = only_request(std::move(out));
  CHECK(req.msgid == 3);
  CHECK(params_text(req) == std::string(300, 'a'));
  CHECK(dec.partial_bytes() == 0);
}

TEST_CASE("pipelined messages in one buffer, or split anywhere, come out in order") {
  const std::string stream =
    request_bytes(1, "health", std::tuple{}) + notification_bytes("cancel", std::tuple{1u}) +
    request_bytes(2, "generate", std::tuple{"x"}) + request_bytes(3, "stats", std::tuple{});
  for (size_t piece : {stream.size(), size_t{1}, size_t{2}, size_t{5}, size_t{7}}) {
    CAPTURE(piece);
    frame_decoder dec;
    std::vector<rpc_message> out;
    for (size_t i = 0; i < stream.size(); i += piece)
      dec.feed(std::string_view(stream).substr(i, piece), out);
    REQUIRE(out.size() == 4);
    CHECK(std::get<rpc_request>(out[0]).msgid == 1);
    CHECK(std::get<rpc_notification>(out[1]).method == "cancel");
    CHECK(std::get<rpc_request>(out[2]).method == "generate");
    CHECK(std::get<rpc_request>(out[3]).msgid == 3);
    CHECK_FALSE(dec.closed());
  }
}

TEST_CASE("a partial message past max_frame_bytes fails at once and closes, answering its msgid") {
  frame_decoder dec({.max_frame_bytes = 1000});
  const std::string bytes = request_bytes(5, "generate", std::tuple{std::string(5000, 'a')});
  std::vector<rpc_message> out;
  dec.feed(bytes.substr(0, 1000), out);
  CHECK(out.empty());  // 1000 bytes held: still allowed
  dec.feed(bytes.substr(1000, 1), out);
  const rpc_decode_error err = only_error(std::move(out));
  CHECK(err.error.code == rpc_errc::too_large);
  CHECK(err.msgid == 5u);
  CHECK(err.close_connection);
  CHECK(dec.closed());
  out.clear();
  dec.feed(request_bytes(6, "health", std::tuple{}), out);  // ignored once closed
  CHECK(out.empty());
}

TEST_CASE("a complete message over max_frame_bytes is answered and the stream goes on") {
  frame_decoder dec({.max_frame_bytes = 1000});
  // No single string is over the limit (a str can never be longer than its frame), the sum is.
  const std::string big = request_bytes(7, "generate",
                                        std::tuple{std::string(600, 'a'), std::string(600, 'b')});
  const std::vector<rpc_message> out = dec.feed(big + request_bytes(8, "health", std::tuple{}));
  REQUIRE(out.size() == 2);
  const auto& err = std::get<rpc_decode_error>(out[0]);
  CHECK(err.error.code == rpc_errc::too_large);
  CHECK(err.msgid == 7u);
  CHECK_FALSE(err.close_connection);
  CHECK(std::get<rpc_request>(out[1]).msgid == 8);
}

TEST_CASE("nesting deeper than max_depth fails, answering the request's msgid") {
  frame_decoder dec({.max_depth = 4});
  // [0, 1, "m", [[[x]]]] nests 4 deep: allowed. One more level is not.
  const std::string ok = request_bytes(1, "m", std::make_tuple(std::make_tuple(std::make_tuple(1))));
  CHECK(std::holds_alternative<rpc_request>(dec.feed(ok).at(0)));
  const std::string deep =
    request_bytes(2, "m", std::make_tuple(std::make_tuple(std::make_tuple(std::make_tuple(1)))));
  const rpc_decode_error err = only_error(dec.feed(deep));
  CHECK(err.error.code == rpc_errc::too_large);
  CHECK(err.error.message.find("nest deeper than 4") != std::string::npos);
  CHECK(err.msgid == 2u);
  CHECK(err.close_connection);
}

TEST_CASE("a 5-byte header declaring 4 billion elements fails without allocating them") {
  for (const char* header : {"\xdd\xff\xff\xff\xff", "\xdf\xff\xff\xff\xff"}) {  // array, map
    frame_decoder dec;
    const size_t before = heap_in_use();
    const rpc_decode_error err = only_error(dec.feed(std::string_view(header, 5)));
    CHECK(heap_in_use() < before + (1 << 20));
    CHECK(err.error.code == rpc_errc::too_large);
    CHECK_FALSE(err.msgid);
    CHECK(err.close_connection);
  }
  // The same inside a request's params: the msgid is read from the bytes already seen.
  frame_decoder dec;
  const std::string head = packed([](packer& pk) { pk.pack_array(4).pack(0).pack(77).pack("m"); });
  const rpc_decode_error err = only_error(dec.feed(head + "\xdd\xff\xff\xff\xff"));
  CHECK(err.error.message.find("array declares more than") != std::string::npos);
  CHECK(err.msgid == 77u);
}

TEST_CASE("a huge declared string holds only the bytes that came, then fails at the frame limit") {
  frame_decoder dec({.max_frame_bytes = 4096});
  const size_t before = heap_in_use();
  std::vector<rpc_message> out;
  dec.feed(std::string_view("\xdb\xff\xff\xff\xff", 5), out);  // str32 of 4 GiB
  CHECK(out.empty());
  CHECK(dec.partial_bytes() == 5);
  CHECK(heap_in_use() < before + (1 << 20));
  dec.feed(std::string(4096, 'a'), out);
  CHECK(only_error(std::move(out)).error.code == rpc_errc::too_large);
  CHECK(dec.closed());
}

TEST_CASE("array and string limits apply to complete values too") {
  frame_decoder dec({.max_array_size = 4, .max_str_bytes = 4});
  CHECK(only_error(dec.feed(request_bytes(1, "m", std::vector{1, 2, 3, 4, 5}))).msgid == 1u);
  frame_decoder dec2({.max_array_size = 4, .max_str_bytes = 4});
  const rpc_decode_error err = only_error(dec2.feed(request_bytes(2, "m", std::tuple{"hello"})));
  CHECK(err.error.code == rpc_errc::too_large);
  CHECK(err.msgid == 2u);
}

TEST_CASE("max_ext_bytes bounds an ext's payload, not payload + type byte") {
  const auto ext_request = [](uint32_t msgid, size_t payload) {
    return packed([&](packer& pk) {
      const std::string body(payload, 'e');
      pk.pack_array(4).pack(0).pack(msgid).pack("m").pack_array(1);
      pk.pack_ext(payload, 1).pack_ext_body(body.data(), static_cast<uint32_t>(payload));
    });
  };
  frame_decoder dec({.max_ext_bytes = 16});
  CHECK(only_request(dec.feed(ext_request(1, 16))).msgid == 1u);
  frame_decoder dec2({.max_ext_bytes = 16});
  CHECK(only_error(dec2.feed(ext_request(2, 17))).error.code == rpc_errc::too_large);
}

TEST_CASE("a top level that is not an array closes the connection") {
  for (const std::string& bytes :
       {packed([](packer& pk) { pk.pack(5); }), packed([](packer& pk) { pk.pack("hello"); }),
        packed([](packer& pk) { pk.pack_map(0); }), packed([](packer& pk) { pk.pack_array(0); })}) {
    frame_decoder dec;
    const rpc_decode_error err = only_error(dec.feed(bytes));
    CHECK(err.error.code == rpc_errc::invalid_request);
    CHECK_FALSE(err.msgid);
    CHECK_FALSE(err.from_notification);
    CHECK(err.close_connection);
    CHECK_FALSE(encode_reply(err));
  }
}

TEST_CASE("a request of the wrong arity or types is answered and the stream goes on") {
  const std::string bad_requests[] = {
    packed([](packer& pk) { pk.pack_array(3).pack(0).pack(11).pack("m"); }),
    packed([](packer& pk) { pk.pack_array(5).pack(0).pack(11).pack("m").pack_array(0).pack(1); }),
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack(11).pack(5).pack_array(0); }),
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack(11).pack("m").pack_map(0); }),
  };
  for (const std::string& bad : bad_requests) {
    frame_decoder dec;
    const std::vector<rpc_message> out = dec.feed(bad + request_bytes(12, "health", std::tuple{}));
    REQUIRE(out.size() == 2);
    const auto& err = std::get<rpc_decode_error>(out[0]);
    CHECK(err.error.code == rpc_errc::invalid_request);
    CHECK(err.msgid == 11u);
    CHECK_FALSE(err.close_connection);
    CHECK(std::get<rpc_request>(out[1]).msgid == 12);
  }
}

TEST_CASE("a notification of the wrong shape is reported by notification") {
  frame_decoder dec;
  const rpc_decode_error err =
    only_error(dec.feed(packed([](packer& pk) { pk.pack_array(2).pack(2).pack("cancel"); })));
  CHECK(err.from_notification);
  CHECK_FALSE(err.msgid);
  CHECK_FALSE(err.close_connection);
  const msgpack::object_handle reply = unpack_one(bytes_of(*encode_reply(err)));
  CHECK(reply.get().via.array.ptr[1].as<std::string>() == "error");
}

TEST_CASE("a msgid that is not a uint32 leaves nobody to answer: the connection closes") {
  const std::string bad_msgids[] = {
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack(-1).pack("m").pack_array(0); }),
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack("id").pack("m").pack_array(0); }),
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack(1.5).pack("m").pack_array(0); }),
    packed([](packer& pk) { pk.pack_array(4).pack(0).pack(uint64_t{1} << 32).pack("m").pack_array(0); }),
  };
  for (const std::string& bad : bad_msgids) {
    frame_decoder dec;
    const rpc_decode_error err = only_error(dec.feed(bad));
    CHECK(err.error.code == rpc_errc::invalid_request);
    CHECK_FALSE(err.msgid);
    CHECK(err.close_connection);
  }
}

TEST_CASE("an unknown message type or a malformed response closes the connection") {
  for (const std::string& bad :
       {packed([](packer& pk) { pk.pack_array(4).pack(3).pack(1).pack("m").pack_array(0); }),
        packed([](packer& pk) { pk.pack_array(3).pack(1).pack(1).pack_nil(); })}) {
    frame_decoder dec;
    CHECK(only_error(dec.feed(bad)).close_connection);
  }
}

TEST_CASE("bytes that are not MessagePack close the connection, answering a readable msgid") {
  frame_decoder dec;
  const rpc_decode_error err = only_error(dec.feed("\xc1"));  // never used in MessagePack
  CHECK(err.error.code == rpc_errc::invalid_request);
  CHECK_FALSE(err.msgid);
  CHECK(err.close_connection);

  frame_decoder dec2;
  const std::string head = packed([](packer& pk) { pk.pack_array(4).pack(0).pack(300).pack("m"); });
  std::vector<rpc_message> out = dec2.feed(request_bytes(299, "health", std::tuple{}));
  for (char c : head + "\x91\xc1")  // the bad byte arrives after the header, one byte at a time
    dec2.feed(std::string_view(&c, 1), out);
  REQUIRE(out.size() == 2);
  CHECK(std::get<rpc_request>(out[0]).msgid == 299);
  const auto& err2 = std::get<rpc_decode_error>(out[1]);
  CHECK(err2.msgid == 300u);
  CHECK(err2.close_connection);
}

TEST_CASE("peek_header reads a request's msgid in any integer encoding") {
  const auto head = [](auto fill) { return peek_header(packed(fill)); };
  CHECK(head([](packer& pk) { pk.pack_array(4).pack(0).pack(5); }).request_msgid == 5u);
  CHECK(head([](packer& pk) { pk.pack_array(4).pack_uint8(0).pack_uint16(513); }).request_msgid == 513u);
  CHECK(head([](packer& pk) { pk.pack_array(4).pack(0).pack_uint64(70000); }).request_msgid == 70000u);
  CHECK(head([](packer& pk) { pk.pack_array(4).pack(0).pack_int16(9); }).request_msgid == 9u);
  const std::string arr16 = std::string("\xdc\x00\x04\x00\xcd\x01\x00", 7);
  CHECK(peek_header(arr16).request_msgid == 256u);
  CHECK_FALSE(head([](packer& pk) { pk.pack_array(4).pack(0).pack_int8(-3); }).request_msgid);
  CHECK_FALSE(head([](packer& pk) { pk.pack_array(3).pack(0).pack(5); }).request_msgid);
  CHECK_FALSE(peek_header(std::string("\x94\x00\xce\x00", 4)).request_msgid);  // truncated
  CHECK(head([](packer& pk) { pk.pack_array(3).pack(2); }).is_notification);
  CHECK_FALSE(peek_header("").is_notification);
}

TEST_CASE("encoders round-trip through msgpack-c") {
  const msgpack::object_handle result =
    unpack_one(bytes_of(encode_result(5, std::map<std::string, int>{{"a", 1}})));
  const auto [type, msgid, error, value] =
    result.get().as<std::tuple<int, uint32_t, msgpack::object, std::map<std::string, int>>>();
  CHECK(type == 1);
  CHECK(msgid == 5);
  CHECK(error.is_nil());
  CHECK(value == std::map<std::string, int>{{"a", 1}});

  const msgpack::object_handle err =
    unpack_one(bytes_of(encode_error(6, make_overloaded("queue full", 250))));
  const msgpack::object_array& a = err.get().via.array;
  REQUIRE(a.size == 4);
  CHECK(a.ptr[0].as<int>() == 1);
  CHECK(a.ptr[1].as<uint32_t>() == 6);
  CHECK(a.ptr[3].is_nil());
  const auto map = a.ptr[2].as<std::map<std::string, msgpack::object>>();
  CHECK(map.size() == 5);
  CHECK(map.at("code").as<int>() == 429);
  CHECK(map.at("type").as<std::string>() == "overloaded");
  CHECK(map.at("message").as<std::string>() == "queue full");
  CHECK(map.at("retryable").as<bool>());
  CHECK(map.at("retry_after_ms").as<uint32_t>() == 250);

  const msgpack::object_handle plain =
    unpack_one(bytes_of(encode_error(7, make_error(rpc_errc::unknown_method, "nope"))));
  const auto plain_map = plain.get().via.array.ptr[2].as<std::map<std::string, msgpack::object>>();
  CHECK(plain_map.size() == 4);
  CHECK(plain_map.at("code").as<int>() == 404);
  CHECK_FALSE(plain_map.at("retryable").as<bool>());
  CHECK(plain_map.count("retry_after_ms") == 0);

  const msgpack::object_handle note = unpack_one(bytes_of(
    encode_notification("token", std::make_tuple(7u, 0u, std::vector<int32_t>{1, 2}, std::string("hi")))));
  const auto [note_type, method, params] =
    note.get()
      .as<std::tuple<int, std::string, std::tuple<uint32_t, uint64_t, std::vector<int32_t>, std::string>>>();
  CHECK(note_type == 2);
  CHECK(method == "token");
  CHECK(params == std::make_tuple(7u, uint64_t{0}, std::vector<int32_t>{1, 2}, std::string("hi")));

  const msgpack::object_handle err_note =
    unpack_one(bytes_of(encode_error_notification(make_error(rpc_errc::validation, "x: bad"))));
  const msgpack::object_array& n = err_note.get().via.array;
  REQUIRE(n.size == 3);
  CHECK(n.ptr[1].as<std::string>() == "error");
  CHECK(n.ptr[2].via.array.ptr[0].as<std::map<std::string, msgpack::object>>().at("code").as<int>() == 422);
}

TEST_CASE("decode errors are answered by response, by notification, or not at all") {
  const rpc_error e = make_error(rpc_errc::invalid_request, "bad");
  const msgpack::object_handle resp = unpack_one(bytes_of(*encode_reply({.error = e, .msgid = 4u})));
  CHECK(resp.get().via.array.ptr[0].as<int>() == 1);
  CHECK(resp.get().via.array.ptr[1].as<uint32_t>() == 4);
  const msgpack::object_handle note =
    unpack_one(bytes_of(*encode_reply({.error = e, .from_notification = true})));
  CHECK(note.get().via.array.ptr[0].as<int>() == 2);
  CHECK_FALSE(encode_reply({.error = e, .close_connection = true}));
}

TEST_CASE("every error code has its type name and retry flag") {
  const std::tuple<rpc_errc, int, const char*, bool> table[] = {
    {rpc_errc::invalid_request, 400, "invalid_request", false},
    {rpc_errc::auth, 401, "auth", false},
    {rpc_errc::forbidden, 403, "forbidden", false},
    {rpc_errc::unknown_method, 404, "unknown_method", false},
    {rpc_errc::too_large, 413, "too_large", false},
    {rpc_errc::validation, 422, "validation", false},
    {rpc_errc::overloaded, 429, "overloaded", true},
    {rpc_errc::cancelled, 499, "cancelled", false},
    {rpc_errc::internal, 500, "internal", false},
    {rpc_errc::unavailable, 503, "unavailable", true},
  };
  for (const auto& [code, number, name, retryable] : table) {
    CHECK(static_cast<int>(code) == number);
    CHECK(type_name(code) == name);
    CHECK(is_retryable(code) == retryable);
  }
}
