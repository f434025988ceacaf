// tools/transport_ucx.cpp
// UCP tag messages between two processes for bench-transport (see transport_ucx.hpp): requests
// without callbacks, each waited on by progressing the worker and polling its status.
#include "tools/transport_ucx.hpp"

#include <stdexcept>

#include "actors/rank/plane_contact.hpp"  // to_hex, from_hex
#include "config/model_config.hpp"        // input_error

#ifdef MOE_HAVE_UCX

#  include <ucp/api/ucp.h>

#  include <cstdio>
#  include <cstdlib>
#  include <deque>
#  include <set>

namespace moe::tools {
namespace {

using clock = std::chrono::steady_clock;

// What a message is, by its tag (matched on every bit).
constexpr ucp_tag_t data_tag = 1;
constexpr ucp_tag_t ack_tag = 2;
constexpr ucp_tag_t stop_tag = 3;
constexpr ucp_tag_t every_bit = ~ucp_tag_t{0};

void check(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK)
    throw std::runtime_error("bench-transport: ucx: " + what + ": " + ucs_status_string(status));
}

}  // namespace

bool ucx_built() noexcept { return true; }
std::string ucx_version() { return ucp_get_version_string(); }

struct ucx_link::impl {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  std::string tls;
  std::chrono::seconds timeout{60};
  std::deque<void*> sends;  // started data sends, oldest first, not yet seen complete

  // Progresses the worker until done(); throws after `timeout`.
  template <class Done>
  void progress_until(Done done, const std::string& what) {
    const auto deadline = clock::now() + timeout;
    while (!done())
      if (ucp_worker_progress(worker) == 0 && clock::now() > deadline)
        throw std::runtime_error("bench-transport: ucx (UCX_TLS=" + tls + "): no " + what + " within " +
                                 std::to_string(timeout.count()) + " s");
  }

  // Waits for a request an nbx call returned (NULL: it completed at once).
  void wait(ucs_status_ptr_t request, const std::string& what) {
    if (request == nullptr)
      return;
    if (UCS_PTR_IS_ERR(request))
      check(UCS_PTR_STATUS(request), what);
    ucs_status_t status = UCS_INPROGRESS;
    progress_until([&] { return (status = ucp_request_check_status(request)) != UCS_INPROGRESS; }, what);
    ucp_request_free(request);
    check(status, what);
  }

  // Frees the oldest sends that have completed.
  void reap_sends() {
    while (!sends.empty()) {
      const ucs_status_t status = ucp_request_check_status(sends.front());
      if (status == UCS_INPROGRESS)
        return;
      ucp_request_free(sends.front());
      sends.pop_front();
      check(status, "data send");
    }
  }

  void send_small(ucp_tag_t tag, const void* data, size_t bytes, const std::string& what) {
    ucp_request_param_t param{};
    wait(ucp_tag_send_nbx(ep, data, bytes, tag, &param), what);
  }
};

ucx_link::ucx_link(const std::string& tls, std::chrono::seconds timeout) : impl_(std::make_unique<impl>()) {
  impl_->tls = tls;
  impl_->timeout = timeout;
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "reading the configuration");
  const ucs_status_t modified = ucp_config_modify(config, "TLS", tls.c_str());
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  const ucs_status_t initialised = modified == UCS_OK ? ucp_init(&params, config, &impl_->context)
                                                      : UCS_ERR_INVALID_PARAM;
  ucp_config_release(config);
  check(modified, "UCX_TLS=" + tls);
  check(initialised, "ucp_init with UCX_TLS=" + tls);
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  const ucs_status_t created = ucp_worker_create(impl_->context, &worker_params, &impl_->worker);
  if (created != UCS_OK)
    ucp_cleanup(impl_->context);
  check(created, "ucp_worker_create");
}

ucx_link::~ucx_link() {
  impl& s = *impl_;
  try {
    s.progress_until([&] { return s.reap_sends(), s.sends.empty(); }, "send completion");
  } catch (const std::exception&) {
    for (void* request : s.sends) {
      ucp_request_cancel(s.worker, request);
      ucp_request_free(request);
    }
  }
  if (s.ep != nullptr) {
    ucp_request_param_t param{};  // flush, then close
    ucs_status_ptr_t request = ucp_ep_close_nbx(s.ep, &param);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
      const auto deadline = clock::now() + std::chrono::seconds(5);
      while (ucp_request_check_status(request) == UCS_INPROGRESS && clock::now() < deadline)
        ucp_worker_progress(s.worker);
      ucp_request_free(request);
    }
  }
  ucp_worker_destroy(s.worker);
  ucp_cleanup(s.context);
}

std::string ucx_link::address() const {
  ucp_address_t* address = nullptr;
  size_t bytes = 0;
  check(ucp_worker_get_address(impl_->worker, &address, &bytes), "ucp_worker_get_address");
  std::string hex = to_hex(address, bytes);
  ucp_worker_release_address(impl_->worker, address);
  return hex;
}

void ucx_link::connect(const std::string& peer_hex) {
  const std::vector<unsigned char> peer = from_hex(peer_hex);
  if (peer.empty())
    throw std::runtime_error("bench-transport: ucx: the peer's worker address is not hex");
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = reinterpret_cast<const ucp_address_t*>(peer.data());
  check(ucp_ep_create(impl_->worker, &params, &impl_->ep), "ucp_ep_create");
}

// ucp_ep_print_info's lines name each lane's transport as "<tl>/<device>", e.g.
// "lane[0]:  2:posix/memory.0 md[2]        -> md[2]/posix/sysdev[255] am am_bw#0".
std::string ucx_link::transports() const {
  char* text = nullptr;
  size_t bytes = 0;
  FILE* stream = open_memstream(&text, &bytes);
  if (stream == nullptr)
    return "?";
  ucp_ep_print_info(impl_->ep, stream);
  std::fclose(stream);
  const std::string info{text, bytes};
  std::free(text);
  std::set<std::string> names;
  for (size_t at = info.find("lane["); at != std::string::npos; at = info.find("lane[", at + 1)) {
    const size_t colon = info.find(':', info.find(']', at) + 2);  // past "lane[i]:", then "<rsc>:"
    if (colon == std::string::npos)
      break;
    const size_t end = info.find_first_of(" .\n", colon + 1);
    names.insert(info.substr(colon + 1, end - colon - 1));
  }
  std::string out;
  for (const std::string& name : names)
    out += (out.empty() ? "" : " ") + name;
  return out.empty() ? "?" : out;
}

void ucx_link::send_data(std::span<const std::byte> bytes) {
  ucp_request_param_t param{};
  ucs_status_ptr_t request = ucp_tag_send_nbx(impl_->ep, bytes.data(), bytes.size(), data_tag, &param);
  if (UCS_PTR_IS_ERR(request))
    check(UCS_PTR_STATUS(request), "data send");
  if (request != nullptr)
    impl_->sends.push_back(request);
}

uint64_t ucx_link::wait_ack() {
  uint64_t value = 0;
  ucp_request_param_t param{};
  impl_->wait(ucp_tag_recv_nbx(impl_->worker, &value, sizeof value, ack_tag, every_bit, &param),
              "acknowledgement");
  impl_->reap_sends();
  return value;
}

void ucx_link::flush() {
  impl& s = *impl_;
  s.progress_until([&] { return s.reap_sends(), s.sends.empty(); }, "send completion");
}

bool ucx_link::wait_data(std::vector<std::byte>& out, bool (*still_wanted)()) {
  impl& s = *impl_;
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h message = nullptr;
  for (uint64_t idle = 0; (message = ucp_tag_probe_nb(s.worker, 0, 0, 1, &info)) == nullptr;)
    if (ucp_worker_progress(s.worker) == 0 && ++idle % 4096 == 0 && !still_wanted())
      return false;
  out.resize(info.length);
  ucp_request_param_t param{};
  s.wait(ucp_tag_msg_recv_nbx(s.worker, out.data(), info.length, message, &param), "data");
  return info.sender_tag != stop_tag;
}

void ucx_link::send_ack(uint64_t value) {
  impl_->send_small(ack_tag, &value, sizeof value, "acknowledgement send");
}

void ucx_link::send_stop() {
  flush();
  const unsigned char stop = 0;
  impl_->send_small(stop_tag, &stop, 1, "stop send");
}

}  // namespace moe::tools

#else  // no UCX: the engine says so

namespace moe::tools {

namespace {
[[noreturn]] void not_built() {
  throw input_error("bench-transport: this moeserve was built without UCX (Debian's libucx-dev was not found "
                    "when cmake ran): install it (tools/setup.sh does) and re-run cmake, or use --engine "
                    "middleman");
}
}  // namespace

bool ucx_built() noexcept { return false; }
std::string ucx_version() { return ""; }

struct ucx_link::impl {};
ucx_link::ucx_link(const std::string&, std::chrono::seconds) { not_built(); }
ucx_link::~ucx_link() = default;
std::string ucx_link::address() const { not_built(); }
void ucx_link::connect(const std::string&) { not_built(); }
std::string ucx_link::transports() const { not_built(); }
void ucx_link::send_data(std::span<const std::byte>) { not_built(); }
uint64_t ucx_link::wait_ack() { not_built(); }
void ucx_link::flush() { not_built(); }
bool ucx_link::wait_data(std::vector<std::byte>&, bool (*)()) { not_built(); }
void ucx_link::send_ack(uint64_t) { not_built(); }
void ucx_link::send_stop() { not_built(); }

}  // namespace moe::tools

#endif
