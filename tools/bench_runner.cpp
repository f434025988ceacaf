// tools/bench_runner.cpp
// One io thread drives every connection: a read loop per socket, writes coalesced per socket
// (what one handler queues goes out in one write), a timer for the next Poisson arrival, one
// for --duration and its grace period, one for progress.
#include "tools/bench_runner.hpp"

#include <asio.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "config/model_config.hpp"
#include "tools/bench_wire.hpp"

namespace moe::tools {

namespace {

using steady = std::chrono::steady_clock;

constexpr auto models_wait = std::chrono::seconds(10);           // for the first answer
constexpr auto cancel_wait = std::chrono::seconds(5);            // for generates we cancelled
constexpr uint64_t arrival_seed_offset = 0x9e3779b97f4a7c15ULL;  // arrivals apart from prompts

double seconds_between(steady::time_point from, steady::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

steady::duration after_seconds(double s) {
  return std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
}

struct connection {
  explicit connection(asio::io_context& io)
      : socket(io), decoder({.max_frame_bytes = size_t{64} << 20, .max_str_bytes = size_t{64} << 20}) {}
  asio::ip::tcp::socket socket;
  net::frame_decoder decoder;
  std::vector<char> read_buffer = std::vector<char>(65536);  // freed once closed and its read ended
  std::string queued;                                        // bytes not handed to the socket yet
  std::string writing;                                       // bytes of the write in progress
  bool write_scheduled = false;                              // a flush is posted or a write in progress
  bool open = true;
  int64_t num_in_flight = 0;    // generates
  http_response_reader http;    // openai: the responses
  uint32_t http_msgid = 0;      // openai: the request in flight (models or a generate), 0: none
  int64_t num_answered = 0;     // openai: responses read whole (kept alive, or not, after them)
  std::string note_kind, note;  // the server's "error" notification, if it sent one
};

/// A generate sent and not answered yet.
struct in_flight_generate {
  size_t record_idx = 0;
  connection* conn = nullptr;
  steady::time_point sent, last_token;
  bool got_token = false;
  int http_status = 0;     // openai: the response's status
  int64_t num_chunks = 0;  // openai: events with text, when no usage comes
  std::string http_bytes;  // openai: the request, to send once more (see close_connection)
  bool resent = false;
  bool cancelled = false;  // by us, after --duration and the grace period
};

/// The lengths must fit the context whatever is drawn (else the server answers 413/422).
/// `prompt_tokens`: the server's count of a --prompt.
void check_fits(const load_shape& shape, const served_model& model, int64_t prompt_tokens) {
  if (model.vocab_size < 1)
    throw input_error("models: the server does not say its vocabulary (vocab_size " +
                      std::to_string(model.vocab_size) + "): give --vocab-size");
  if (model.max_context == 0)
    return;  // an OpenAI server that does not say: its own errors will tell
  const length_range in = length_range_of(shape.input_len, shape.range_ratio);
  const length_range out = length_range_of(shape.output_len, shape.range_ratio);
  const int64_t longest = (shape.prompt ? prompt_tokens : in.max) + out.max;
  if (longest > model.max_context)
    throw input_error(std::string(shape.prompt
                                    ? "--prompt (" + std::to_string(prompt_tokens) + " tokens)/--output-len"
                                    : "--input-len/--output-len") +
                      "/--range-ratio: requests of up to " + std::to_string(longest) +
                      " tokens do not fit the model's context of " + std::to_string(model.max_context));
}

class load_run {
 public:
  load_run(const bench_config& cfg, const std::function<void(const bench_progress&)>& on_progress)
      : cfg_(cfg), on_progress_(on_progress) {}

  bench_run run() {
    connect_all();
    for (auto& c : conns_)
      read(*c);
    if (openai()) {
      models_msgid_ = next_msgid_++;
      conns_.front()->http_msgid = models_msgid_;
      send(*conns_.front(), models_http_request(host_header(), cfg_.base_path, cfg_.api_key));
    } else if (!cfg_.api_key.empty()) {  // answered before anything after it on each connection
      for (auto& c : conns_) {
        auth_msgids_.insert(next_msgid_);
        send(*c, auth_frame(next_msgid_++, cfg_.api_key));
      }
    }
    if (!openai()) {
      models_msgid_ = next_msgid_++;
      send(*conns_.front(), models_frame(models_msgid_));
    }
    deadline_timer_.expires_after(models_wait);
    deadline_timer_.async_wait([this](std::error_code ec) {
      if (!ec && !started_)
        throw input_error("no answer to models from " + cfg_.host + ":" + std::to_string(cfg_.port) + " in " +
                          std::to_string(models_wait.count()) + " s (is it `moeserve serve`?)");
    });
    io_.run();
    return {.model = model_, .records = std::move(records_), .duration_s = seconds_between(start_, end_)};
  }

 private:
  void connect_all() {
    const std::string address = cfg_.host + ":" + std::to_string(cfg_.port);
    asio::ip::tcp::resolver resolver(io_);
    std::error_code ec;
    const auto endpoints = resolver.resolve(cfg_.host, std::to_string(cfg_.port), ec);
    if (ec)
      throw input_error("cannot resolve " + cfg_.host + ": " + ec.message());
    endpoints_ = endpoints;
    for (int64_t i = 0; i < cfg_.num_connections; ++i)
      if (!open_connection())
        throw input_error("cannot connect to " + address + ": " + connect_error_ +
                          " (is the server running?)");
  }

  /// A new connection to the server (the caller starts its reads), or null.
  connection* open_connection() {
    auto c = std::make_unique<connection>(io_);
    std::error_code ec;
    asio::connect(c->socket, endpoints_, ec);
    if (ec) {
      connect_error_ = ec.message();
      return nullptr;
    }
    c->socket.set_option(asio::ip::tcp::no_delay(true));
    conns_.push_back(std::move(c));
    return conns_.back().get();
  }

  [[nodiscard]] bool openai() const { return cfg_.backend == "openai"; }
  [[nodiscard]] std::string host_header() const { return cfg_.host + ":" + std::to_string(cfg_.port); }

  void start(int64_t prompt_tokens) {
    if (cfg_.vocab_size > 0)
      model_.vocab_size = cfg_.vocab_size;
    check_fits(cfg_.shape, model_, prompt_tokens);
    source_.emplace(cfg_.shape, model_.vocab_size, cfg_.seed);
    arrivals_.emplace(cfg_.request_rate, cfg_.seed + arrival_seed_offset);
    next_arrival_s_ = arrivals_->next_arrival_s();
    start_ = steady::now();
    started_ = true;
    deadline_timer_.cancel();  // the wait for models
    if (cfg_.duration_s) {
      deadline_timer_.expires_at(start_ + after_seconds(*cfg_.duration_s));
      deadline_timer_.async_wait([this](std::error_code ec) {
        if (!ec)
          on_duration_end();
      });
    }
    if (on_progress_)
      tick();
    dispatch();
  }

  // --- issuing -------------------------------------------------------------------------------

  [[nodiscard]] bool more_to_issue() const {
    return !stop_issuing_ && (!cfg_.num_prompts || issued_ < *cfg_.num_prompts);
  }
  [[nodiscard]] bool at_cap() const {
    return cfg_.max_concurrency && static_cast<int64_t>(generates_.size()) >= *cfg_.max_concurrency;
  }
  [[nodiscard]] double elapsed_s() const { return seconds_between(start_, steady::now()); }

  /// The open connection with the fewest generates in flight (openai: an idle one), or nullptr.
  connection* least_loaded() {
    connection* best = nullptr;
    for (auto& c : conns_)
      if (c->open && (best == nullptr || c->num_in_flight < best->num_in_flight) &&
          (!openai() || c->http_msgid == 0))
        best = c.get();
    return best;
  }

  /// Issues every request that has arrived while under the cap; else waits for the next arrival.
  void dispatch() {
    while (more_to_issue() && !at_cap()) {
      connection* conn = least_loaded();
      if (conn == nullptr) {
        if (openai() && std::any_of(conns_.begin(), conns_.end(), [](const auto& c) { return c->open; }))
          break;               // each open one is busy: the next answer issues again
        stop_issuing_ = true;  // every connection is gone
        break;
      }
      if (next_arrival_s_ > elapsed_s()) {
        arrival_timer_.expires_at(start_ + after_seconds(next_arrival_s_));
        arrival_timer_.async_wait([this](std::error_code ec) {
          if (!ec)
            dispatch();
        });
        return;
      }
      issue(*conn);
      next_arrival_s_ = arrivals_->next_arrival_s();
    }
    finish_if_done();
  }

  void issue(connection& conn) {
    const bench_request req = source_->next();
    const uint32_t msgid = next_msgid_++;
    const auto now = steady::now();
    records_.emplace_back();
    generates_.emplace(
      msgid,
      in_flight_generate{.record_idx = records_.size() - 1, .conn = &conn, .sent = now, .last_token = now});
    ++conn.num_in_flight;
    ++issued_;
    if (openai()) {
      conn.http_msgid = msgid;
      std::string& bytes = generates_.at(msgid).http_bytes;
      bytes = completion_http_request(host_header(), cfg_.base_path, cfg_.api_key, model_.id, req,
                                      cfg_.shape);
      return send(conn, bytes);
    }
    send(conn, generate_frame(msgid, req, cfg_.shape));
  }

  // --- the wire ------------------------------------------------------------------------------

  void send(connection& conn, const msgpack::sbuffer& bytes) {
    send(conn, std::string_view(bytes.data(), bytes.size()));
  }

  void send(connection& conn, std::string_view bytes) {
    if (!conn.open)
      return;
    conn.queued.append(bytes);
    if (!conn.write_scheduled) {
      conn.write_scheduled = true;
      asio::post(io_, [this, c = &conn] { flush(*c); });
    }
  }

  void flush(connection& conn) {
    if (!conn.open)
      return;
    if (conn.queued.empty()) {
      conn.write_scheduled = false;
      return;
    }
    conn.writing.swap(conn.queued);
    conn.queued.clear();
    asio::async_write(conn.socket, asio::buffer(conn.writing), [this, c = &conn](std::error_code ec, size_t) {
      if (ec)
        return close_connection(*c, "write: " + ec.message());
      flush(*c);
    });
  }

  void read(connection& conn) {
    conn.socket.async_read_some(asio::buffer(conn.read_buffer), [this, c = &conn](std::error_code ec,
                                                                                  size_t n) {
      if (!c->open) {
        std::vector<char>().swap(c->read_buffer);  // a connection replaced (openai) costs no buffer
        return;
      }
      if (ec) {
        close_connection(*c, ec == asio::error::eof ? "the server closed the connection" : ec.message());
        std::vector<char>().swap(c->read_buffer);  // no read is pending: this one ended
        return;
      }
      if (openai()) {
        std::vector<http_event> events;
        if (auto err = c->http.feed(std::string_view(c->read_buffer.data(), n), events))
          return close_connection(*c, *err, "protocol");
        for (http_event& e : events) {
          on_http(*c, e);
          if (!c->open || done_)
            return;
        }
        return read(*c);
      }
      for (net::rpc_message& message : c->decoder.feed(std::string_view(c->read_buffer.data(), n))) {
        handle(*c, message);
        if (!c->open || done_)
          return;
      }
      read(*c);
    });
  }

  void handle(connection& conn, net::rpc_message& message) {
    if (auto* response = std::get_if<net::rpc_response>(&message))
      return on_response(*response);
    if (auto* note = std::get_if<net::rpc_notification>(&message)) {
      if (note->method == "token")
        return on_token(*note);
      if (note->method == "error" && note->params.via.array.size >= 1) {
        try {
          std::tie(conn.note_kind, conn.note) = error_of(note->params.via.array.ptr[0]);
        } catch (const std::exception&) {
          std::tie(conn.note_kind, conn.note) = std::pair("protocol", "an unreadable error notification");
        }
      }
      return;
    }
    if (auto* error = std::get_if<net::rpc_decode_error>(&message))
      return close_connection(conn, "unreadable reply: " + error->error.message, "protocol");
  }

  /// [2, "token", [msgid, seq, token_ids, text_delta]]
  void on_token(const net::rpc_notification& note) {
    const std::optional<token_note> token = read_token(note);
    if (token)
      on_tokens(token->msgid, token->num_tokens);
  }

  void on_tokens(uint32_t msgid, uint32_t num_tokens) {
    const auto it = generates_.find(msgid);
    if (it == generates_.end() || num_tokens == 0)
      return;
    in_flight_generate& g = it->second;
    bench_record& rec = records_[g.record_idx];
    const auto now = steady::now();
    if (g.got_token)
      rec.itl_s.push_back(seconds_between(g.last_token, now));
    else
      rec.ttft_s = seconds_between(g.sent, now);
    rec.itl_s.insert(rec.itl_s.end(), num_tokens - 1, 0.0);  // tokens that came together
    g.got_token = true;
    g.last_token = now;
  }

  /// openai: a response's head, one of its events, or its end.
  void on_http(connection& conn, http_event& e) {
    const uint32_t msgid = conn.http_msgid;
    if (msgid == models_msgid_ && !started_) {
      if (e.what != http_event::kind::body_end)
        return;
      conn.http_msgid = 0;
      if (e.status != 200)
        throw input_error("models: the server answered " + std::to_string(e.status) + ": " +
                          read_error_message(e.data));
      model_ = read_models_json(e.data);
      return start(0);
    }
    const auto it = generates_.find(msgid);
    if (it == generates_.end())
      return;
    in_flight_generate& g = it->second;
    bench_record& rec = records_[g.record_idx];
    switch (e.what) {
      case http_event::kind::head: g.http_status = e.status; return;
      case http_event::kind::data: {
        const completion_chunk c = read_completion_chunk(e.data);
        if (c.error && rec.error.empty()) {
          rec.error_kind = "stream";
          rec.error = *c.error;
        }
        if (c.prompt_tokens)
          rec.prompt_tokens = *c.prompt_tokens;
        if (c.completion_tokens)
          rec.output_tokens = *c.completion_tokens;
        if (c.finish_reason && (*c.finish_reason == "abort" || *c.finish_reason == "error") &&
            rec.error.empty()) {
          rec.error_kind = "finish_reason";
          rec.error = "finish_reason: " + *c.finish_reason;
        }
        if (c.has_text) {
          ++g.num_chunks;
          on_tokens(msgid, 1);  // one gap per chunk, as vLLM counts
        }
        return;
      }
      case http_event::kind::body_end: {
        conn.http_msgid = 0;
        ++conn.num_answered;
        rec.e2e_s = seconds_between(g.sent, steady::now());
        if (!g.got_token)
          rec.ttft_s = rec.e2e_s;
        if (g.http_status != 200) {
          rec.error_kind = std::to_string(g.http_status);
          rec.error = read_error_message(e.data);
        } else if (rec.error.empty()) {
          if (rec.output_tokens == 0)
            rec.output_tokens = g.num_chunks;  // a server without the usage chunk
          rec.success = true;
        }
        settle(it);
        return dispatch();
      }
    }
  }

  void on_response(const net::rpc_response& r) {
    if (auth_msgids_.erase(r.msgid) > 0) {
      if (!r.error.is_nil())
        throw input_error("auth (--api-key): the server answered " + error_of(r.error).second);
      return;
    }
    if (r.msgid == models_msgid_ && !started_) {
      model_ = read_models(r);
      if (!cfg_.shape.prompt)
        return start(0);
      tokenize_msgid_ = next_msgid_++;  // the prompt's length, as the server counts it
      return send(*conns_.front(), tokenize_frame(tokenize_msgid_, *cfg_.shape.prompt));
    }
    if (r.msgid == tokenize_msgid_ && !started_)
      return start(read_token_count(r));
    const auto it = generates_.find(r.msgid);
    if (it == generates_.end())
      return;  // the answer to one of our cancels
    const in_flight_generate g = it->second;
    bench_record& rec = records_[g.record_idx];
    rec.e2e_s = seconds_between(g.sent, steady::now());
    if (!g.got_token)
      rec.ttft_s = rec.e2e_s;
    read_outcome(r, rec);
    if (g.cancelled && !rec.success) {  // a cancel that came too late is moot
      rec.error_kind = "cancelled";
      char why[96];
      std::snprintf(why, sizeof why, "still running %g s after --duration", cfg_.grace_s);
      rec.error = why;
    }
    settle(it);
    dispatch();
  }

  /// Counts a generate whose record is complete and forgets it.
  void settle(std::unordered_map<uint32_t, in_flight_generate>::iterator it) {
    const bench_record& rec = records_[it->second.record_idx];
    (rec.success ? completed_ : failed_) += 1;
    rejected_ += rec.error_kind == "429" ? 1 : 0;
    --it->second.conn->num_in_flight;
    generates_.erase(it);
  }

  /// Fails the connection's generates with what the server said before closing, if anything.
  void close_connection(connection& conn, const std::string& reason, const std::string& kind = "closed") {
    if (!conn.open)
      return;
    conn.open = false;
    std::error_code ignored;
    conn.socket.close(ignored);
    if (!started_ && &conn == conns_.front().get())
      throw input_error("the server closed the connection before answering models: " +
                        (conn.note.empty() ? reason : conn.note));
    // openai: servers close kept-alive connections (llama-server after every stream, whatever
    // its headers say); the run goes on over a new one, and a request the old one took after an
    // answer, and never answered at all, is sent once more there
    connection* fresh = openai() && started_ && !done_ && kind != "cancelled" ? open_connection() : nullptr;
    if (fresh)
      read(*fresh);
    for (auto it = generates_.begin(); it != generates_.end();) {
      auto next = std::next(it);
      in_flight_generate& g = it->second;
      if (g.conn == &conn && fresh && !g.cancelled && !g.resent && g.http_status == 0 &&
          conn.num_answered > 0 && fresh->http_msgid == 0) {
        g.resent = true;
        g.conn = fresh;
        --conn.num_in_flight;
        ++fresh->num_in_flight;
        fresh->http_msgid = it->first;
        send(*fresh, g.http_bytes);
      } else if (g.conn == &conn) {
        bench_record& rec = records_[it->second.record_idx];
        rec.error_kind = it->second.cancelled ? "cancelled" : conn.note.empty() ? kind : conn.note_kind;
        rec.error = conn.note.empty() ? reason : conn.note;
        settle(it);
      }
      it = next;
    }
    if (started_)
      dispatch();
  }

  // --- ending --------------------------------------------------------------------------------

  void on_duration_end() {
    stop_issuing_ = true;
    arrival_timer_.cancel();
    if (generates_.empty())
      return finish();
    deadline_timer_.expires_after(after_seconds(cfg_.grace_s));
    deadline_timer_.async_wait([this](std::error_code ec) {
      if (!ec)
        cancel_in_flight();
    });
  }

  /// Sends `cancel` for every generate still running; gives up on their answers after a while.
  void cancel_in_flight() {
    for (auto& [msgid, g] : generates_)
      g.cancelled = true;
    if (openai()) {  // an HTTP request is cancelled by closing its connection
      std::vector<connection*> busy;
      for (auto& [msgid, g] : generates_)
        busy.push_back(g.conn);
      for (connection* c : busy)
        close_connection(*c, "still running after --duration and the grace period", "cancelled");
      return finish_if_done();
    }
    for (auto& [msgid, g] : generates_)
      send(*g.conn, cancel_frame(next_msgid_++, msgid));
    deadline_timer_.expires_after(cancel_wait);
    deadline_timer_.async_wait([this](std::error_code ec) {
      if (ec)
        return;
      while (!generates_.empty()) {
        bench_record& rec = records_[generates_.begin()->second.record_idx];
        rec.error_kind = "cancelled";
        rec.error = "no answer to cancel";
        settle(generates_.begin());
      }
      finish();
    });
  }

  void finish_if_done() {
    if (started_ && !more_to_issue() && generates_.empty())
      finish();
  }

  void finish() {
    if (done_)
      return;
    done_ = true;
    end_ = steady::now();
    if (on_progress_) {
      bench_progress last = progress();
      last.finished = true;
      on_progress_(last);
    }
    io_.stop();
  }

  [[nodiscard]] bench_progress progress() const {
    return {.completed = completed_,
            .failed = failed_,
            .rejected = rejected_,
            .in_flight = static_cast<int64_t>(generates_.size()),
            .elapsed_s = elapsed_s()};
  }

  void tick() {
    progress_timer_.expires_at(start_ + std::chrono::seconds(++num_ticks_));
    progress_timer_.async_wait([this](std::error_code ec) {
      if (ec || done_)
        return;
      on_progress_(progress());
      tick();
    });
  }

  const bench_config& cfg_;
  const std::function<void(const bench_progress&)>& on_progress_;
  asio::io_context io_;  // first: destroyed after every socket and timer
  std::vector<std::unique_ptr<connection>> conns_;
  asio::steady_timer arrival_timer_{io_}, deadline_timer_{io_}, progress_timer_{io_};
  std::optional<request_source> source_;
  std::optional<arrival_schedule> arrivals_;
  served_model model_;
  uint32_t next_msgid_ = 1, models_msgid_ = 0, tokenize_msgid_ = 0;
  std::unordered_set<uint32_t> auth_msgids_;  // unanswered auths
  bool started_ = false, stop_issuing_ = false, done_ = false;
  steady::time_point start_, end_;
  double next_arrival_s_ = 0.0;
  int64_t issued_ = 0, completed_ = 0, failed_ = 0, rejected_ = 0, num_ticks_ = 0;
  std::unordered_map<uint32_t, in_flight_generate> generates_;  // by msgid
  asio::ip::tcp::resolver::results_type endpoints_;
  std::string connect_error_;
  std::vector<bench_record> records_;
};

}  // namespace

bench_run run_bench(const bench_config& cfg, const std::function<void(const bench_progress&)>& on_progress) {
  return load_run(cfg, on_progress).run();
}

}  // namespace moe::tools
