// actors/rank/data_plane.cpp
// The UCX plane (data_plane.hpp). Every call into the worker holds one mutex: the rank threads'
// sends and the progress thread's loop (UCX runs the receive callbacks inside it). Sends carry
// their header and bytes in one heap block, freed when UCX reports the send complete.
// Rendezvous arrivals (large payloads) are taken after the callback returns, as UCX asks.
#include "actors/rank/data_plane.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/send.hpp>

#include "actors/atoms.hpp"
#include "actors/kernel_inspect.hpp"
#include "actors/rank/plane_contact.hpp"
#include "config/model_config.hpp"  // input_error

#ifdef MOE_HAVE_UCX

#  include <poll.h>
#  include <ucp/api/ucp.h>

#  include <array>
#  include <atomic>
#  include <cstdlib>
#  include <cstring>
#  include <map>
#  include <mutex>
#  include <optional>
#  include <set>
#  include <stdexcept>
#  include <thread>
#  include <unordered_map>
#  include <vector>

namespace moe {
namespace {

constexpr unsigned payload_am_id = 7;

enum class payload_kind : uint32_t { dispatch = 1, combine = 2 };

struct wire_header {
  uint32_t kind = 0;
  uint32_t reserved = 0;
  uint64_t dest = 0;  // the destination rank's actor id
  plane_key key{};    // the receiving plane's
};

// An open endpoint to a peer plane, and the key its payloads carry.
struct peer_link {
  ucp_ep_h ep = nullptr;
  plane_key key{};
};

struct outgoing {
  class ucx_plane* plane = nullptr;
  wire_header header;
  std::vector<char> bytes;
};

struct rendezvous {
  wire_header header;
  void* descriptor = nullptr;
  size_t length = 0;
};

struct incoming {
  class ucx_plane* plane = nullptr;
  wire_header header;
  std::vector<char> bytes;
};

void check(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK)
    throw std::runtime_error("data plane: ucx: " + what + ": " + ucs_status_string(status));
}

class ucx_plane final : public data_plane {
 public:
  ucx_plane(caf::actor_system& sys, const std::string& bind_host) : sys(sys), key(random_plane_key()) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "reading the configuration");
    // network transports only on the interface of the node's own address, unless the operator
    // chose devices (UCX_NET_DEVICES): a node on 127.0.0.1 is reachable on loopback only
    if (const std::string device = interface_of(bind_host);
        !device.empty() && std::getenv("UCX_NET_DEVICES") == nullptr)
      if (const ucs_status_t s = ucp_config_modify(config, "NET_DEVICES", device.c_str()); s != UCS_OK) {
        ucp_config_release(config);
        check(s, "NET_DEVICES=" + device);
      }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    const ucs_status_t initialised = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check(initialised, "ucp_init");
    ucp_worker_params_t worker_params{};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;  // one caller at a time: worker_mutex
    if (const ucs_status_t s = ucp_worker_create(context, &worker_params, &worker); s != UCS_OK) {
      ucp_cleanup(context);
      check(s, "ucp_worker_create");
    }
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = payload_am_id;
    handler.cb = &ucx_plane::on_arrival;
    handler.arg = this;
    ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &handler);
    if (s == UCS_OK)
      s = ucp_worker_get_efd(worker, &efd);
    if (s != UCS_OK) {
      ucp_worker_destroy(worker);
      ucp_cleanup(context);
      check(s, "setting up the worker");
    }
    ucp_address_t* address = nullptr;
    size_t bytes = 0;
    if (const ucs_status_t a = ucp_worker_get_address(worker, &address, &bytes); a != UCS_OK) {
      ucp_worker_destroy(worker);
      ucp_cleanup(context);
      check(a, "ucp_worker_get_address");
    }
    contact = contact_text(key, address, bytes);
    ucp_worker_release_address(worker, address);
    progress_thread = std::thread([this] { run(); });
  }

  ~ucx_plane() override {
    stopping = true;
    ucp_worker_signal(worker);
    progress_thread.join();
    std::lock_guard lock(worker_mutex);
    for (auto& [address, link] : eps) {
      const ucp_ep_h ep = link.ep;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // peers may be gone: do not wait for them
      ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
        for (int i = 0; i < 100000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i)
          ucp_worker_progress(worker);
        ucp_request_free(request);
      }
    }
    for (const rendezvous& r : pending)
      ucp_am_data_release(worker, r.descriptor);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }

  ucx_plane(const ucx_plane&) = delete;
  ucx_plane& operator=(const ucx_plane&) = delete;

  std::string address() const override { return contact; }

  void attach(const caf::actor& rank) override {
    std::lock_guard lock(worker_mutex);
    targets[rank.id()] = rank.address();
  }

  void send(const std::string& peer, const caf::actor& dest, const ep_dispatch& payload) override {
    send_payload(peer, dest, payload_kind::dispatch, payload);
  }
  void send(const std::string& peer, const caf::actor& dest, const ep_combine& payload) override {
    send_payload(peer, dest, payload_kind::combine, payload);
  }

  data_plane_stats stats() const override {
    return {.messages_sent = messages_sent,
            .bytes_sent = bytes_sent,
            .messages_received = messages_received,
            .bytes_received = bytes_received,
            .dropped = dropped};
  }

 private:
  template <class Payload>
  void send_payload(const std::string& peer, const caf::actor& dest, payload_kind kind,
                    const Payload& payload) {
    auto msg = std::make_unique<outgoing>();
    msg->plane = this;
    msg->header = {.kind = static_cast<uint32_t>(kind), .reserved = 0, .dest = dest.id(), .key = {}};
    caf::binary_serializer sink{sys, msg->bytes};
    caf::serializer& f = sink;
    if (f(const_cast<Payload&>(payload))) {  // the inspect functions take non-const references
      ++dropped;
      return;
    }
    const size_t bytes = msg->bytes.size();
    {
      std::lock_guard lock(worker_mutex);
      const peer_link* link = endpoint(peer);
      if (link == nullptr) {
        ++dropped;
        return;
      }
      const ucp_ep_h ep = link->ep;
      msg->header.key = link->key;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &ucx_plane::on_sent;
      param.user_data = msg.get();
      ucs_status_ptr_t request = ucp_am_send_nbx(ep, payload_am_id, &msg->header, sizeof msg->header,
                                                 msg->bytes.data(), bytes, &param);
      if (UCS_PTR_IS_ERR(request)) {
        ++dropped;
        return;
      }
      if (request != nullptr)
        static_cast<void>(msg.release());  // on_sent frees it
    }
    ++messages_sent;
    bytes_sent += bytes;
    ucp_worker_signal(worker);  // the progress thread moves what is left of it
  }

  static void on_sent(void* request, ucs_status_t status, void* user_data) {
    const std::unique_ptr<outgoing> msg(static_cast<outgoing*>(user_data));
    if (status != UCS_OK)  // the peer went away meanwhile
      ++msg->plane->dropped;
    ucp_request_free(request);
  }

  // The endpoint to the plane whose contact is `peer` (opened on first use); null when it
  // cannot be, or failed before (a process that comes back has a new worker and contact).
  const peer_link* endpoint(const std::string& peer) {
    if (auto it = eps.find(peer); it != eps.end())
      return &it->second;
    const std::optional<plane_contact> c = parse_contact(peer);
    if (!c || failed.count(peer) > 0)
      return nullptr;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(c->worker.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // a peer that dies fails its sends, nothing more
    params.err_handler.cb = &ucx_plane::on_peer_error;
    params.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    if (ucp_ep_create(worker, &params, &ep) != UCS_OK)
      return nullptr;
    return &eps.emplace(peer, peer_link{.ep = ep, .key = c->key}).first->second;
  }

  // A peer's endpoint failed (the peer is gone): it is closed and forgotten, so that a peer
  // at that address again (it cannot be: a restarted process has a new worker) would get a new one.
  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t) {
    auto* self = static_cast<ucx_plane*>(arg);  // inside progress: worker_mutex is held
    for (auto it = self->eps.begin(); it != self->eps.end(); ++it)
      if (it->second.ep == ep) {
        self->failed.insert(it->first);
        self->eps.erase(it);
        break;
      }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (request != nullptr && !UCS_PTR_IS_ERR(request))
      ucp_request_free(request);
  }

  static ucs_status_t on_arrival(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<ucx_plane*>(arg);
    if (header_length != sizeof(wire_header)) {
      ++self->dropped;
      return UCS_OK;
    }
    wire_header h;
    std::memcpy(&h, header, sizeof h);
    if (h.key != self->key) {  // not from a peer the control plane introduced
      ++self->dropped;
      return UCS_OK;  // a rendezvous left unreceived is dropped by UCX
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {  // taken after the callback
      self->pending.push_back({.header = h, .descriptor = data, .length = length});
      return UCS_INPROGRESS;
    }
    self->deliver(h, static_cast<const char*>(data), length);
    return UCS_OK;
  }

  static void on_received(void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<incoming> in(static_cast<incoming*>(user_data));
    if (status == UCS_OK)
      in->plane->deliver(in->header, in->bytes.data(), in->bytes.size());
    else
      ++in->plane->dropped;
    ucp_request_free(request);
  }

  // Starts the receives of the rendezvous arrivals the last progress left (worker_mutex held).
  void take_pending() {
    std::vector<rendezvous> todo = std::move(pending);
    pending.clear();
    for (const rendezvous& r : todo) {
      auto in = std::make_unique<incoming>();
      in->plane = this;
      in->header = r.header;
      in->bytes.resize(r.length);
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &ucx_plane::on_received;
      param.user_data = in.get();
      ucs_status_ptr_t request = ucp_am_recv_data_nbx(worker, r.descriptor, in->bytes.data(), r.length,
                                                      &param);
      if (UCS_PTR_IS_ERR(request))
        ++dropped;
      else if (request == nullptr)  // done at once: no callback
        deliver(in->header, in->bytes.data(), in->bytes.size());
      else
        static_cast<void>(in.release());  // on_received frees it
    }
  }

  // Decodes a payload and hands it to its rank as the middleman would (worker_mutex held).
  void deliver(const wire_header& h, const char* data, size_t length) {
    const auto target = targets.find(h.dest);
    const caf::actor rank = target == targets.end() ? caf::actor{}
                                                    : caf::actor_cast<caf::actor>(target->second);
    if (!rank) {
      ++dropped;
      return;
    }
    caf::binary_deserializer source{sys, data, length};
    caf::deserializer& f = source;
    bool ok = false;
    if (h.kind == static_cast<uint32_t>(payload_kind::dispatch)) {
      ep_dispatch d;
      if ((ok = !f(d)))
        caf::anon_send(rank, dispatch_atom::value, std::move(d));
    } else if (h.kind == static_cast<uint32_t>(payload_kind::combine)) {
      ep_combine c;
      if ((ok = !f(c)))
        caf::anon_send(rank, dispatch_atom::value, std::move(c));
    }
    if (!ok) {
      ++dropped;
      return;
    }
    ++messages_received;
    bytes_received += length;
  }

  // The progress thread: progresses while anything moves, then sleeps on the worker's event
  // descriptor (a send wakes it with ucp_worker_signal), checking every 100 ms for the end.
  void run() {
    while (!stopping) {
      ucs_status_t armed = UCS_OK;
      {
        std::lock_guard lock(worker_mutex);
        while (ucp_worker_progress(worker) != 0 || !pending.empty())
          take_pending();
        armed = ucp_worker_arm(worker);
      }
      if (armed == UCS_ERR_BUSY)
        continue;  // more came meanwhile
      pollfd fd{.fd = efd, .events = POLLIN, .revents = 0};
      static_cast<void>(::poll(&fd, 1, 100));
    }
  }

  caf::actor_system& sys;
  const plane_key key;
  std::string contact;  // address(): set once the worker is up
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int efd = -1;
  mutable std::mutex worker_mutex;
  std::map<std::string, peer_link> eps;  // by the peer's contact
  std::set<std::string> failed;          // contacts whose endpoint failed: not dialled again
  std::unordered_map<caf::actor_id, caf::actor_addr> targets;
  std::vector<rendezvous> pending;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> messages_sent{0}, bytes_sent{0}, messages_received{0}, bytes_received{0}, dropped{0};
  std::thread progress_thread;
};

}  // namespace

bool ucx_plane_built() noexcept { return true; }

std::shared_ptr<data_plane> start_ucx_plane(caf::actor_system& sys, const std::string& bind_host) {
  return std::make_shared<ucx_plane>(sys, bind_host);
}

}  // namespace moe

#else  // no UCX: payloads go as messages

namespace moe {

bool ucx_plane_built() noexcept { return false; }

std::shared_ptr<data_plane> start_ucx_plane(caf::actor_system&, const std::string&) {
  throw input_error("data_plane = \"ucx\": this moeserve was built without UCX (Debian's libucx-dev was not "
                    "found when cmake ran): install it (tools/setup.sh does) and re-run cmake, or set "
                    "data_plane = \"middleman\" in the cluster file");
}

}  // namespace moe

#endif
