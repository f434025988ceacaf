// actors/rank/nccl_transport.cpp
#include "actors/rank/nccl_transport.hpp"

#include "config/model_config.hpp"  // input_error

#ifdef MOE_HAVE_NCCL

#  include <cuda_runtime.h>
#  include <nccl.h>

#  include <atomic>
#  include <cstring>
#  include <stdexcept>
#  include <thread>

namespace moe {
namespace {

// A round's payload from one peer: far above a V3 dispatch (tokens x 7168 FP8), and a bound on
// what a corrupt size could make this rank allocate.
constexpr uint64_t max_payload_bytes = uint64_t{1} << 31;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

// Staging memory, grown as needed: page-locked on the host (`pinned`), or on the device.
struct staged_bytes {
  bool pinned = false;
  char* data = nullptr;
  size_t size = 0;
  void reserve(size_t n) {
    if (n <= size)
      return;
    release();
    auto** at = reinterpret_cast<void**>(&data);
    check_cuda(pinned ? cudaMallocHost(at, n) : cudaMalloc(at, n), pinned ? "cudaMallocHost" : "cudaMalloc");
    size = n;
  }
  void release() {
    if (data != nullptr)
      pinned ? cudaFreeHost(data) : cudaFree(data);
    data = nullptr;
    size = 0;
  }
  ~staged_bytes() { release(); }
};

class nccl_engine final : public exchange_engine {
 public:
  nccl_engine(int device_index, int64_t group_rank, std::vector<bool> remote_ranks)
      : device(device_index), rank(group_rank), remote(std::move(remote_ranks)) {}

  ~nccl_engine() override {
    if (comm != nullptr)
      ncclCommAbort(comm);  // frees it, whatever state a failure or a close left it in
    if (stream != nullptr)
      cudaStreamDestroy(stream);
  }

  bool join(const std::vector<char>& id) override {
    if (id.size() != sizeof(ncclUniqueId))
      throw std::runtime_error("a communicator id of " + std::to_string(id.size()) + " bytes, not " +
                               std::to_string(sizeof(ncclUniqueId)));
    check_cuda(cudaSetDevice(device), "cudaSetDevice");  // this thread's device from now on
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait polls, so abort() ends it
    check_nccl(ncclCommInitRankConfig(&comm, static_cast<int>(remote.size()), uid, static_cast<int>(rank),
                                      &config),
               "ncclCommInitRankConfig");
    if (!settle())
      return false;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t n = remote.size() * sizeof(uint64_t);
    sizes_host.reserve(2 * n);
    sizes_device.reserve(2 * n);
    return true;
  }

  bool exchange(const std::vector<std::vector<char>>& to, std::vector<std::vector<char>>& from) override {
    const size_t n = remote.size();
    auto* out_sizes = reinterpret_cast<uint64_t*>(sizes_host.data);
    uint64_t* in_sizes = out_sizes + n;
    for (size_t r = 0; r < n; ++r) {
      out_sizes[r] = to[r].size();
      in_sizes[r] = 0;
    }
    auto* dev_out_sizes = reinterpret_cast<uint64_t*>(sizes_device.data);
    uint64_t* dev_in_sizes = dev_out_sizes + n;
    check_cuda(cudaMemcpyAsync(dev_out_sizes, out_sizes, n * sizeof(uint64_t), cudaMemcpyHostToDevice,
                               stream),
               "copying the sizes");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < n; ++r)
      if (remote[r]) {
        check_nccl(ncclSend(dev_out_sizes + r, 1, ncclUint64, static_cast<int>(r), comm, stream), "ncclSend");
        check_nccl(ncclRecv(dev_in_sizes + r, 1, ncclUint64, static_cast<int>(r), comm, stream), "ncclRecv");
      }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    if (!settle())
      return false;
    check_cuda(cudaMemcpyAsync(in_sizes, dev_in_sizes, n * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream),
               "copying the sizes back");
    if (!finish())
      return false;

    std::vector<size_t> out_at(n + 1, 0), in_at(n + 1, 0);
    for (size_t r = 0; r < n; ++r) {
      if (in_sizes[r] > max_payload_bytes)
        throw std::runtime_error("group rank " + std::to_string(r) + " announced " +
                                 std::to_string(in_sizes[r]) + " bytes");
      out_at[r + 1] = out_at[r] + to[r].size();
      in_at[r + 1] = in_at[r] + (remote[r] ? in_sizes[r] : 0);
    }
    out_host.reserve(std::max<size_t>(1, out_at[n]));
    in_host.reserve(std::max<size_t>(1, in_at[n]));
    out_device.reserve(std::max<size_t>(1, out_at[n]));
    in_device.reserve(std::max<size_t>(1, in_at[n]));
    for (size_t r = 0; r < n; ++r)
      if (!to[r].empty())
        std::memcpy(out_host.data + out_at[r], to[r].data(), to[r].size());
    if (out_at[n] > 0)
      check_cuda(cudaMemcpyAsync(out_device.data, out_host.data, out_at[n], cudaMemcpyHostToDevice, stream),
                 "copying the payloads");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (size_t r = 0; r < n; ++r) {
      if (!remote[r])
        continue;
      const int peer = static_cast<int>(r);
      if (const size_t bytes = out_at[r + 1] - out_at[r]; bytes > 0)
        check_nccl(ncclSend(out_device.data + out_at[r], bytes, ncclChar, peer, comm, stream), "ncclSend");
      if (const size_t bytes = in_at[r + 1] - in_at[r]; bytes > 0)
        check_nccl(ncclRecv(in_device.data + in_at[r], bytes, ncclChar, peer, comm, stream), "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    if (!settle())
      return false;
    if (in_at[n] > 0)
      check_cuda(cudaMemcpyAsync(in_host.data, in_device.data, in_at[n], cudaMemcpyDeviceToHost, stream),
                 "copying the payloads back");
    if (!finish())
      return false;
    for (size_t r = 0; r < n; ++r)
      from[r].assign(in_host.data + in_at[r], in_host.data + in_at[r + 1]);
    return true;
  }

  void abort() override { aborted.store(true, std::memory_order_release); }

 private:
  // Waits until the communicator's last call is done (non-blocking mode): false once aborted.
  bool settle() {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      if (state == ncclSuccess)
        return true;
      check_nccl(state, "the communicator");
      if (aborted.load(std::memory_order_acquire))
        return false;
      std::this_thread::yield();
    }
  }

  // Waits until the stream ran what was queued on it: false once aborted (a peer that never
  // enters the round leaves its kernel waiting until the communicator is aborted).
  bool finish() {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess)
        return true;
      if (e != cudaErrorNotReady)
        check_cuda(e, "the communication stream");
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      check_nccl(state, "the communicator");
      if (aborted.load(std::memory_order_acquire))
        return false;
      std::this_thread::yield();
    }
  }

  int device;
  int64_t rank;
  std::vector<bool> remote;
  std::atomic<bool> aborted{false};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  staged_bytes sizes_host{.pinned = true}, out_host{.pinned = true}, in_host{.pinned = true};
  staged_bytes sizes_device, out_device, in_device;
};

class nccl_transport final : public collective_transport {
 public:
  explicit nccl_transport(int count) : devices(count) {}
  [[nodiscard]] std::string name() const override { return "NCCL"; }
  [[nodiscard]] std::vector<char> make_id() override {
    ncclUniqueId uid;
    check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
    const auto* bytes = reinterpret_cast<const char*>(&uid);
    return {bytes, bytes + sizeof uid};
  }
  [[nodiscard]] std::unique_ptr<exchange_engine> engine(int64_t global_rank, int64_t rank,
                                                        const std::vector<bool>& remote) override {
    return std::make_unique<nccl_engine>(static_cast<int>(global_rank % devices), rank, remote);
  }

 private:
  int devices;
};

}  // namespace

bool nccl_built() noexcept { return true; }

int nccl_devices() noexcept {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::shared_ptr<collective_transport> start_nccl_transport(int64_t ranks_per_group) {
  const int devices = nccl_devices();
  if (devices == 0)
    throw input_error("data_plane = \"nccl\": no CUDA device is visible to this process");
  if (devices < ranks_per_group)
    throw input_error("data_plane = \"nccl\" puts each rank of a group on a CUDA device of its own: " +
                      std::to_string(ranks_per_group) + " ranks of one group here, " +
                      std::to_string(devices) + " devices");
  return std::make_shared<nccl_transport>(devices);
}

}  // namespace moe

#else

namespace moe {

bool nccl_built() noexcept { return false; }
int nccl_devices() noexcept { return 0; }
std::shared_ptr<collective_transport> start_nccl_transport(int64_t /*ranks_per_group*/) {
  throw input_error("data_plane = \"nccl\": this moeserve was built without NCCL (it needs nvcc and NCCL "
                    "at build time)");
}

}  // namespace moe

#endif
