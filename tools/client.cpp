// tools/client.cpp
// `moeserve client`: sends one streaming generate to a running `moeserve serve` (after `auth`
// when given a key) and prints the text as it arrives; the finish reason and token counts go to
// stderr.
#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "config/model_config.hpp"
#include "net/rpc_frame.hpp"
#include "tools/bench_wire.hpp"
#include "tools/commands.hpp"
#include "tools/sampling_options.hpp"

namespace moe::tools {

namespace {

struct client_options {
  std::string host = "127.0.0.1";
  int port = 8765;
  std::string prompt, system;
  bool chat = false;
  std::string api_key;
  sampling_flags sampling;
};

constexpr uint32_t generate_msgid = 1;
constexpr uint32_t auth_msgid = 2;

[[noreturn]] void throw_server_error(const msgpack::object& error_map) {
  const auto error = error_map.as<std::map<std::string, msgpack::object>>();
  throw std::runtime_error("server: " + std::to_string(error.at("code").as<int>()) + " " +
                           error.at("message").as<std::string>());
}

/// [0, 1, "generate", [ {prompt | messages, sampling names..., stream: true} ]]
msgpack::sbuffer generate_frame(const client_options& o, const sampling_params& p) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack(0).pack(generate_msgid).pack("generate").pack_array(1);
  pk.pack_map(13 + (p.seed ? 1 : 0));
  if (o.chat) {
    pk.pack("messages").pack_array(o.system.empty() ? 1 : 2);
    if (!o.system.empty())
      pk.pack_map(2).pack("role").pack("system").pack("content").pack(o.system);
    pk.pack_map(2).pack("role").pack("user").pack("content").pack(o.prompt);
  } else {
    pk.pack("prompt").pack(o.prompt);
  }
  pk.pack("max_tokens").pack(p.max_tokens).pack("temperature").pack(p.temperature);
  pk.pack("top_p").pack(p.top_p).pack("top_k").pack(p.top_k).pack("min_p").pack(p.min_p);
  pk.pack("repetition_penalty").pack(p.repetition_penalty);
  pk.pack("presence_penalty").pack(p.presence_penalty);
  pk.pack("frequency_penalty").pack(p.frequency_penalty);
  pk.pack("stop").pack(p.stop).pack("stop_token_ids").pack(p.stop_token_ids);
  pk.pack("ignore_eos").pack(p.ignore_eos).pack("stream").pack(true);
  if (p.seed)
    pk.pack("seed").pack(*p.seed);
  return out;
}

/// Prints a "token" notification's text; true when `message` is the final response.
bool show(const net::rpc_message& message) {
  if (const auto* note = std::get_if<net::rpc_notification>(&message)) {
    if (note->method == "error" && note->params.via.array.size >= 1)
      throw_server_error(note->params.via.array.ptr[0]);
    if (note->method == "token" && note->params.via.array.size >= 4 &&
        note->params.via.array.ptr[3].type == msgpack::type::STR) {
      const auto& delta = note->params.via.array.ptr[3];
      std::fwrite(delta.via.str.ptr, 1, delta.via.str.size, stdout);
      std::fflush(stdout);
    }
    return false;
  }
  if (const auto* error = std::get_if<net::rpc_decode_error>(&message))
    throw std::runtime_error("unreadable reply from the server: " + error->error.message);
  const auto* response = std::get_if<net::rpc_response>(&message);
  if (response == nullptr)
    return false;
  if (!response->error.is_nil())  // auth's or generate's
    throw_server_error(response->error);
  if (response->msgid != generate_msgid)
    return false;
  const auto result = response->result.as<std::map<std::string, msgpack::object>>();
  const auto usage = result.at("usage").as<std::map<std::string, int64_t>>();
  std::fprintf(stderr, "\n[finish: %s | %lld prompt tokens | %lld generated]\n",
               result.at("finish_reason").as<std::string>().c_str(),
               static_cast<long long>(usage.at("prompt_tokens")),
               static_cast<long long>(usage.at("completion_tokens")));
  return true;
}

void run(const CLI::App& cmd, client_options& o) {
  const sampling_params params = finish_sampling_options(cmd, o.sampling);
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  std::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  asio::connect(socket, resolver.resolve(o.host, std::to_string(o.port), ec), ec);
  if (ec)
    throw input_error("cannot connect to " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  if (!o.api_key.empty()) {  // answered before the generate
    const msgpack::sbuffer frame = auth_frame(auth_msgid, o.api_key);
    asio::write(socket, asio::buffer(frame.data(), frame.size()));
  }
  const msgpack::sbuffer frame = generate_frame(o, params);
  asio::write(socket, asio::buffer(frame.data(), frame.size()));
  net::frame_decoder decoder({.max_frame_bytes = size_t{64} << 20, .max_str_bytes = size_t{64} << 20});
  std::array<char, 16384> buffer{};
  for (;;) {
    const size_t n = socket.read_some(asio::buffer(buffer), ec);
    if (ec)
      throw std::runtime_error("the server closed the connection: " + ec.message());
    for (const net::rpc_message& message : decoder.feed(std::string_view(buffer.data(), n)))
      if (show(message))
        return;
  }
}

}  // namespace

void add_client(CLI::App& app) {
  auto o = std::make_shared<client_options>();
  CLI::App* cmd = app.add_subcommand("client", "send a prompt to `moeserve serve`, print the streamed text");
  cmd->add_option("prompt", o->prompt, "prompt text")->required();
  cmd->add_option("--host", o->host, "server address (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "server port (default 8765)")->check(CLI::Range(1, 65535));
  cmd->add_flag("--chat", o->chat, "send the prompt as a user message (chat template)");
  cmd->add_option("--system", o->system, "system prompt (with --chat)");
  cmd->add_option("--api-key", o->api_key, "authenticate with this key first; env MOESERVE_API_KEY")
    ->envname("MOESERVE_API_KEY");
  add_sampling_options(*cmd, o->sampling);
  cmd->callback([cmd, o] { run(*cmd, *o); });
}

}  // namespace moe::tools
