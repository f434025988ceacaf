// net/http/http_connection.cpp
// NOTE: everything here runs on the server's one io thread; the session's answers come through
// write() once its deliver() has posted them here. One request is in flight at a time (HTTP/1.1
// answers in order); the next is dispatched from a posted handler, so a client pipelining many
// requests the session answers at once does not recurse.
#include "net/http/http_connection.hpp"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <string_view>
#include <utility>

#include "net/http/http_response.hpp"
#include "net/http/json_values.hpp"
#include "net/http/openai_request.hpp"
#include "net/serving_metrics.hpp"

namespace moe::net {
namespace {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr size_t max_pipelined = 32;  // parsed requests waiting; then reading pauses
constexpr std::string_view json_type = "application/json";
// After a last answer, how long what the client still sends is read and dropped before the
// socket closes: closing with unread bytes would reset the connection, and a client could lose
// the answer (a 413 to a body it is still sending).
constexpr auto linger_time = std::chrono::seconds(2);

std::atomic<uint64_t> num_answers{0};  // completions answered by this process: their ids

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

/// The wire's params for a body-less or JSON-bodied admin or probe call: [] when empty, an
/// array as it is, anything else as its one element.
std::variant<msgpack::sbuffer, rpc_error> params_of_body(const std::string& body) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    pk.pack_array(0);
    return out;
  }
  auto value = parse_json_body(body);
  if (auto* err = std::get_if<rpc_error>(&value))
    return *err;
  const json& v = std::get<json>(value);
  if (v.is_array()) {
    pack_json(pk, v);
  } else {
    pk.pack_array(1);
    pack_json(pk, v);
  }
  return out;
}

msgpack::sbuffer no_params() {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer>(out).pack_array(0);
  return out;
}

/// The role of a request's `Authorization: Bearer KEY`; without the header, a connection's
/// first role (client when no api key is set).
std::variant<auth_role, rpc_error> role_of(const http_request& request, const auth_keys& keys) {
  const std::string* header = request.header("authorization");
  if (!header)
    return initial_role(keys);
  constexpr std::string_view bearer = "Bearer ";
  if (header->size() <= bearer.size() || header->compare(0, bearer.size(), bearer) != 0)
    return make_error(rpc_errc::auth, "authorization: expected \"Bearer <key>\"");
  const auth_role role = role_for(keys, std::string_view(*header).substr(bearer.size()));
  if (role == auth_role::none)
    return wrong_token();
  return role;
}

}  // namespace

http_connection::http_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared)
    : client_connection(std::move(socket), std::move(shared)), parser_(shared_->limits.http) {}

void http_connection::start() {
  start_session();
  arm_timer();
  read();
}

void http_connection::on_closed() {
  pending_.clear();
  current_.reset();
}

void http_connection::shed(const rpc_error& error) {
  if (closed_)
    return;
  pending_.clear();
  current_keep_alive_ = false;
  if (current_)
    current_->keep_alive = false;
  session_->shed(error);  // answers the generate in flight, if any
  if (current_)           // a probe in flight: answered here
    fail(error);
  close_after_writes();
}

void http_connection::on_written_closing() {
  if (closed_ || lingering_)
    return;
  lingering_ = true;
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  timer_.expires_after(linger_time);
  timer_.async_wait([self = self<http_connection>()](std::error_code ec) {
    if (!ec)
      self->close();
  });
}

void http_connection::on_written() {
  if (!current_ && pending_.empty())
    arm_timer();  // idle now: the keep-alive timeout runs
}

void http_connection::read() {
  if (reading_paused_)
    return;
  socket_.async_read_some(asio::buffer(read_buffer_),
                          [self = self<http_connection>()](std::error_code ec, size_t n) {
                            self->on_read(ec, n);
                          });
}

void http_connection::on_read(std::error_code ec, size_t num_bytes) {
  if (closed_)
    return;
  if (ec)
    return close();  // the client went away: what it had in flight is cancelled
  if (lingering_)
    return read();  // what it sends after our last answer is dropped
  const bool was_mid = parser_.mid_request();
  const size_t before = pending_.size();
  if (!parse_error_) {
    std::vector<http_request> parsed;
    parse_error_ = parser_.feed(std::string_view(read_buffer_.data(), num_bytes), parsed);
    for (http_request& r : parsed)
      pending_.push_back(std::move(r));
  }
  if (parser_.mid_request() && (!was_mid || pending_.size() > before))
    request_started_ = clock::now();
  next();
  arm_timer();
  if (pending_.size() >= max_pipelined) {
    reading_paused_ = true;  // next() reads again once they are answered
    return;
  }
  read();
}

void http_connection::next() {
  if (closed_ || closing_ || current_)
    return;
  if (!pending_.empty()) {
    http_request request = std::move(pending_.front());
    pending_.pop_front();
    if (reading_paused_ && pending_.size() < max_pipelined / 2) {
      reading_paused_ = false;
      read();
    }
    return dispatch(request);
  }
  if (parse_error_) {
    const http_parse_error& e = *parse_error_;
    send(http_response(e.status, json_type,
                       dump_json(json{{"error",
                                       {{"message", e.message},
                                        {"type", "invalid_request_error"},
                                        {"param", nullptr},
                                        {"code", "invalid_request"}}}}),
                       /*keep_alive=*/false));
    close_after_writes();
  }
}

void http_connection::dispatch(http_request& request) {
  current_keep_alive_ = request.keep_alive && !shared_->counters->draining;
  try {
    route(request);
  } catch (const std::exception& e) {  // a bug must not take the server down
    if (!current_)
      current_ = exchange{.keep_alive = current_keep_alive_};
    fail(make_error(rpc_errc::internal, std::string(request.path()) + ": " + e.what()));
  }
}

void http_connection::route(http_request& request) {
  const std::string_view path = request.path();
  const std::string& method = request.method;
  const bool get = method == "GET";
  const bool post = method == "POST";
  exchange ex{.keep_alive = current_keep_alive_};
  current_ = ex;  // errors answer it; call() replaces it with the request sent
  auto role = role_of(request, shared_->keys);
  const bool open = path == "/health" || path == "/metrics";  // as vLLM's: scrapers send no key
  if (auto* err = std::get_if<rpc_error>(&role)) {
    if (!open)
      return fail(*err);
    role = auth_role::none;
  }
  session_->set_role(path == "/metrics" ? std::max(std::get<auth_role>(role), auth_role::client)
                                        : std::get<auth_role>(role));
  const std::string& model = shared_->target->model_name;
  auto method_not_allowed = [&](std::string_view allowed) {
    send(http_response(
      405, json_type,
      dump_json(error_json(make_error(rpc_errc::invalid_request, "method: " + method + " is not allowed on " +
                                                                   std::string(path) + " (use " +
                                                                   std::string(allowed) + ")"))),
      ex.keep_alive, "Allow: " + std::string(allowed) + "\r\n"));
    finish({});
  };
  if (path == "/health" || path == "/ready" || path == "/stats" || path == "/v1/models" ||
      path == "/metrics") {
    if (!get)
      return method_not_allowed("GET");
    ex.kind = path == "/v1/models" ? answer_kind::models
              : path == "/metrics" ? answer_kind::metrics
                                   : answer_kind::plain;
    const std::string wire = path == "/v1/models" ? "models"
                             : path == "/metrics" ? "stats"
                                                  : std::string(path.substr(1));
    return call(wire, no_params(), ex);
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
      path == "/detokenize") {
    if (!post)
      return method_not_allowed("POST");
    auto body = parse_json_body(request.body);
    if (auto* err = std::get_if<rpc_error>(&body))
      return fail(*err);
    const json& value = std::get<json>(body);
    if (path == "/tokenize" || path == "/detokenize") {
      const bool tok = path == "/tokenize";
      auto params = tok ? translate_tokenize(value, model) : translate_detokenize(value, model);
      if (auto* err = std::get_if<rpc_error>(&params))
        return fail(*err);
      ex.kind = tok ? answer_kind::tokenize : answer_kind::detokenize;
      return call(tok ? "tokenize" : "detokenize", std::get<msgpack::sbuffer>(params), ex);
    }
    const bool chat = path == "/v1/chat/completions";
    auto generate = translate_generate(value, chat ? openai_endpoint::chat : openai_endpoint::completions,
                                       model);
    if (auto* err = std::get_if<rpc_error>(&generate))
      return fail(*err);
    auto& t = std::get<translated_generate>(generate);
    ex.kind = answer_kind::generate;
    ex.answer = {.request = t.request,
                 .id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++num_answers),
                 .created = unix_now()};
    return call("generate", t.params, ex);
  }
  if (path.starts_with("/admin/") && path.size() > 7) {
    if (!get && !post)
      return method_not_allowed("GET, POST");
    auto params = params_of_body(request.body);
    if (auto* err = std::get_if<rpc_error>(&params))
      return fail(*err);
    return call("admin." + std::string(path.substr(7)), std::get<msgpack::sbuffer>(params), ex);
  }
  fail(make_error(rpc_errc::unknown_method, "path: no such endpoint " + std::string(path).substr(0, 128)));
}

void http_connection::call(const std::string& method, const msgpack::sbuffer& params, exchange ex) {
  ex.msgid = next_msgid_++;
  current_ = std::move(ex);
  msgpack::sbuffer frame;
  msgpack::packer<msgpack::sbuffer> pk(frame);
  pk.pack_array(4).pack_uint8(0).pack_uint32(current_->msgid).pack(method);
  frame.write(params.data(), params.size());
  rpc_message message = classify_message(msgpack::unpack(frame.data(), frame.size()));
  session_->handle(message);  // may answer at once, through write()
}

void http_connection::write(msgpack::sbuffer bytes) {
  if (closed_ || !current_)
    return;  // a late answer (the request was shed or its client left)
  rpc_message message = classify_message(msgpack::unpack(bytes.data(), bytes.size()));
  if (auto* response = std::get_if<rpc_response>(&message)) {
    if (response->msgid == current_->msgid)
      answer(*response);
    return;
  }
  if (auto* note = std::get_if<rpc_notification>(&message); note && note->method == "token")
    stream_token(note->params);
}

void http_connection::stream_token(const msgpack::object& params) {
  exchange& ex = *current_;
  if (ex.kind != answer_kind::generate || !ex.answer.request.stream || params.type != msgpack::type::ARRAY ||
      params.via.array.size < 4 || params.via.array.ptr[0].type != msgpack::type::POSITIVE_INTEGER ||
      params.via.array.ptr[0].via.u64 != ex.msgid)
    return;
  if (!ex.stream_started) {
    ex.stream_started = true;
    send(http_stream_head(200, "text/event-stream", ex.keep_alive));
  }
  send(http_chunk(sse_event(chunk_json(ex.answer, params, *shared_->target->tok))));
}

void http_connection::answer(const rpc_response& response) {
  exchange& ex = *current_;
  if (response.error.type != msgpack::type::NIL)
    return fail(error_of(response.error));
  const msgpack::object& result = response.result;
  const serving_target& target = *shared_->target;
  json body;
  switch (ex.kind) {
    case answer_kind::generate:
      if (ex.answer.request.stream) {
        if (!ex.stream_started) {
          ex.stream_started = true;
          send(http_stream_head(200, "text/event-stream", ex.keep_alive));
        }
        std::string tail;
        for (const json& chunk : final_chunks_json(ex.answer, result))
          tail += sse_event(chunk);
        tail += sse_done;
        send(http_chunk(tail) + std::string(http_last_chunk));
        return finish({});
      }
      body = completion_json(ex.answer, result, *target.tok);
      break;
    case answer_kind::models:
      body = models_json(result, std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch() -
                                   (clock::now() - shared_->counters->start))
                                   .count());
      break;
    case answer_kind::tokenize: body = tokenize_json(result, static_cast<int64_t>(target.max_context)); break;
    case answer_kind::detokenize: body = {{"prompt", to_json(result)}}; break;
    case answer_kind::metrics:
      return finish(http_response(
        200, "text/plain; version=0.0.4; charset=utf-8",
        render_metrics(result, shared_->counters->histograms.get(), target.model_name), ex.keep_alive));
    case answer_kind::plain: body = to_json(result); break;
  }
  finish(http_response(200, json_type, dump_json(body), ex.keep_alive));
}

void http_connection::fail(const rpc_error& error) {
  exchange& ex = *current_;
  if (ex.stream_started) {  // the head is out: the error is the stream's last event
    send(http_chunk(sse_event(error_json(error)) + sse_done) + std::string(http_last_chunk));
    return finish({});
  }
  finish(http_error_response(error, ex.keep_alive));
}

void http_connection::finish(std::string bytes) {
  const bool keep_alive = current_ && current_->keep_alive;
  current_.reset();
  if (!bytes.empty())
    send(std::move(bytes));
  if (!keep_alive)
    return close_after_writes();
  arm_timer();
  asio::post(socket_.get_executor(), [self = self<http_connection>()] { self->next(); });
}

void http_connection::arm_timer() {
  if (lingering_)
    return;
  const server_limits& limits = shared_->limits;
  const bool busy = current_ || !pending_.empty() || writing_;
  const auto deadline = parser_.mid_request() ? request_started_ + limits.read_timeout
                        : busy                ? clock::now() + limits.idle_timeout
                                              : clock::now() + limits.keep_alive_timeout;
  timer_.expires_at(deadline);
  timer_.async_wait([self = self<http_connection>()](std::error_code ec) {
    if (ec || self->closed_ || self->timer_.expiry() > clock::now())
      return;  // cancelled or re-armed
    const server_limits& l = self->shared_->limits;
    const auto now = clock::now();
    if (self->parser_.mid_request() && now - self->request_started_ >= l.read_timeout) {
      if (self->current_)
        return self->close();  // nothing can be answered out of turn
      self->pending_.clear();
      self->send(http_error_response(
        make_error(static_cast<rpc_errc>(408),
                   "request: not received whole within " + std::to_string(l.read_timeout.count()) + " ms"),
        /*keep_alive=*/false));
      return self->close_after_writes();
    }
    if (self->stalled(l.idle_timeout))
      return self->close();  // a reader that stopped reading
    if (self->current_ || !self->pending_.empty() || self->writing_ || self->session_->busy())
      return self->arm_timer();  // busy, not idle
    self->close();               // keep-alive timeout
  });
}

}  // namespace moe::net
