// kernels/cuda/cuda_backend.cpp
// cuda_backend: host buffers in, host buffers out. The backend interface passes host pointers
// today, so each op copies its inputs to device scratch, runs the kernel on the backend's
// stream, copies the outputs back and synchronises.
// NOTE: the copies make these ops slow; device-resident tensors come with the GPU issue.
#include "kernels/cuda/cuda_backend.hpp"

#include <cstdio>
#include <stdexcept>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launchers.hpp"

namespace moe {
namespace {

[[noreturn]] void not_implemented(const char* op) {
  throw std::logic_error(std::string("op ") + op + " not implemented on CUDA yet");
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

namespace cuda {

// The C++17 mirrors must follow kernels/backend.hpp field for field (the .cu files cannot include
// it: it pulls in C++20 headers). A field added there breaks these first.
static_assert(sizeof(rms_norm_args) == sizeof(rms_norm_params), "rms_norm_args out of date");
static_assert(sizeof(moe_gate_args) == sizeof(moe_gate_params), "moe_gate_args out of date");

void rms_norm(const rms_norm_params& p, cudaStream_t stream) {
  rms_norm(rms_norm_args{p.x, p.weight, p.out, p.num_tokens, p.dim, p.stride, p.eps}, stream);
}

void moe_gate(const moe_gate_params& p, cudaStream_t stream) {
  moe_gate(moe_gate_args{p.logits, p.bias, p.topk_ids, p.topk_weights, p.num_tokens, p.num_experts,
                         p.num_groups, p.topk_group, p.top_k, p.norm_topk_prob, p.routed_scaling_factor},
           stream);
}

}  // namespace cuda

cuda_backend::cuda_backend(int device) : device_(device), name_("cuda:" + std::to_string(device)) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

cuda_backend::~cuda_backend() {
  // Errors are ignored here: a destructor must not throw, and the process may be exiting.
  cudaSetDevice(device_);
  if (scratch_ != nullptr)
    cudaFree(scratch_);
  if (stream_ != nullptr)
    cudaStreamDestroy(stream_);
}

bool cuda_backend::supports(op_kind op) const noexcept {
  return op == op_kind::rms_norm || op == op_kind::moe_gate;
}

void* cuda_backend::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_ != nullptr) {
      MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      MOE_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    MOE_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void cuda_backend::embedding(const embedding_params&) { not_implemented("embedding"); }
void cuda_backend::linear(const linear_params&) { not_implemented("linear"); }
void cuda_backend::rope(const rope_params&) { not_implemented("rope"); }
void cuda_backend::store_kv(const store_kv_params&) { not_implemented("store_kv"); }
void cuda_backend::mla_attention(const mla_attention_params&) { not_implemented("mla_attention"); }
void cuda_backend::silu_mul(const silu_mul_params&) { not_implemented("silu_mul"); }
void cuda_backend::add(const add_params&) { not_implemented("add"); }
void cuda_backend::moe_experts(const moe_experts_params&) { not_implemented("moe_experts"); }

void cuda_backend::rms_norm(const rms_norm_params& p) {
  if (p.num_tokens <= 0)
    return;
  if (p.dim <= 0 || (p.stride != 0 && p.stride < p.dim))
    throw std::invalid_argument("cuda rms_norm: dim must be > 0 and stride 0 or >= dim");
  // Same row layout on the device as on the host; only the dim values of each row travel
  // (2D copies), so the host's gaps between rows of out are left untouched.
  const size_t stride = static_cast<size_t>(p.stride == 0 ? p.dim : p.stride);
  const size_t row_bytes = static_cast<size_t>(p.dim) * sizeof(float);
  const size_t pitch = stride * sizeof(float);
  const size_t rows_bytes = align_up((static_cast<size_t>(p.num_tokens) - 1) * pitch + row_bytes);
  const bool in_place = p.out == p.x;
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  char* base = static_cast<char*>(scratch(align_up(row_bytes) + rows_bytes * (in_place ? 1 : 2)));
  auto* weight = reinterpret_cast<float*>(base);
  auto* x = reinterpret_cast<float*>(base + align_up(row_bytes));
  auto* out = in_place ? x : reinterpret_cast<float*>(base + align_up(row_bytes) + rows_bytes);
  MOE_CUDA_CHECK(cudaMemcpyAsync(weight, p.weight, row_bytes, cudaMemcpyHostToDevice, stream_));
  MOE_CUDA_CHECK(
    cudaMemcpy2DAsync(x, pitch, p.x, pitch, row_bytes, p.num_tokens, cudaMemcpyHostToDevice, stream_));
  cuda::rms_norm(cuda::rms_norm_args{x, weight, out, p.num_tokens, p.dim, p.stride, p.eps}, stream_);
  MOE_CUDA_CHECK(
    cudaMemcpy2DAsync(p.out, pitch, out, pitch, row_bytes, p.num_tokens, cudaMemcpyDeviceToHost, stream_));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void cuda_backend::moe_gate(const moe_gate_params& p) {
  if (p.num_tokens <= 0)
    return;
  if (p.num_experts <= 0 || p.top_k <= 0)
    throw std::invalid_argument("cuda moe_gate: num_experts and top_k must be > 0");
  const size_t logits_bytes = static_cast<size_t>(p.num_tokens * p.num_experts) * sizeof(float);
  const size_t bias_bytes = p.bias == nullptr ? 0 : static_cast<size_t>(p.num_experts) * sizeof(float);
  const size_t ids_bytes = static_cast<size_t>(p.num_tokens * p.top_k) * sizeof(int32_t);
  const size_t weights_bytes = static_cast<size_t>(p.num_tokens * p.top_k) * sizeof(float);
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  char* base = static_cast<char*>(
    scratch(align_up(logits_bytes) + align_up(bias_bytes) + align_up(ids_bytes) + align_up(weights_bytes)));
  auto* logits = reinterpret_cast<float*>(base);
  auto* bias = p.bias == nullptr ? nullptr : reinterpret_cast<float*>(base + align_up(logits_bytes));
  auto* ids = reinterpret_cast<int32_t*>(base + align_up(logits_bytes) + align_up(bias_bytes));
  auto* weights = reinterpret_cast<float*>(reinterpret_cast<char*>(ids) + align_up(ids_bytes));
  MOE_CUDA_CHECK(cudaMemcpyAsync(logits, p.logits, logits_bytes, cudaMemcpyHostToDevice, stream_));
  if (bias != nullptr)
    MOE_CUDA_CHECK(cudaMemcpyAsync(bias, p.bias, bias_bytes, cudaMemcpyHostToDevice, stream_));
  cuda::moe_gate(cuda::moe_gate_args{logits, bias, ids, weights, p.num_tokens, p.num_experts, p.num_groups,
                                     p.topk_group, p.top_k, p.norm_topk_prob, p.routed_scaling_factor},
                 stream_);
  MOE_CUDA_CHECK(cudaMemcpyAsync(p.topk_ids, ids, ids_bytes, cudaMemcpyDeviceToHost, stream_));
  MOE_CUDA_CHECK(cudaMemcpyAsync(p.topk_weights, weights, weights_bytes, cudaMemcpyDeviceToHost, stream_));
  MOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<std::unique_ptr<backend>> make_cuda_backends() {
  std::vector<std::unique_ptr<backend>> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it; any error means "no GPU"
    return out;
  }
  for (int d = 0; d < count; ++d)
    out.push_back(std::make_unique<cuda_backend>(d));
  return out;
}

std::string cuda_status() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  }
  if (count == 0)
    return "no CUDA device: cudaGetDeviceCount found 0";
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%d device%s (runtime %d.%d, driver %d.%d):", count, count == 1 ? "" : "s",
                runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
  std::string status = buf;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      cudaGetLastError();
      status += " cuda:" + std::to_string(d) + " (properties unavailable)";
      continue;
    }
    std::snprintf(buf, sizeof buf, "%s cuda:%d %s sm_%d%d %.1f GiB", d == 0 ? "" : ",", d, prop.name,
                  prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
    status += buf;
  }
  return status;
}

}  // namespace moe
