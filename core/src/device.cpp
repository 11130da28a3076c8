#include "labkit/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <sys/mman.h>

namespace labkit {

namespace {
// Zeroed host memory. A buffer of 2 MiB or more is asked to live in 2 MiB pages
// (transparent huge pages): 512 times fewer pages for the TLB to map and for a
// transport to look up. Open MPI's shared-memory transport copies a large
// message straight between processes (CMA), walking the pages of both buffers;
// on a 2-core host that took a 16 MiB allreduce from 4-5 GB/s busbw to 8-9
// (book chapter 80). Linux's default is huge pages only where madvise asks.
void* host_allocate(std::size_t bytes) {
  constexpr std::size_t kHugePage = 2 << 20;
  if (bytes < kHugePage) {
    void* p = std::calloc(bytes ? bytes : 1, 1);
    if (!p) throw std::bad_alloc();
    return p;
  }
  bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, bytes);
  if (!p) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB, which is only slower
  std::memset(p, 0, bytes);
  return p;
}
void host_copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
void host_zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }

constexpr Device kCpu = {
    .kind = DeviceKind::cpu,
    .name = "cpu",
    .allocate = host_allocate,
    .release = [](void* p) { std::free(p); },
    .copy_from_host = host_copy,
    .copy_to_host = host_copy,
    .zero = host_zero,
    .synchronize = [] {},
    .holds = [](const void*) { return true; },
    .copy = host_copy,
    .reduce = reduce_on_host,
    .divide = divide_on_host,
    .encoder_forward = ops::encoder_forward<float>,
    .encoder_backward = ops::encoder_backward<float>,
    .matmul_forward = ops::matmul_forward<float>,
    .matmul_backward = ops::matmul_backward<float>,
    .layernorm_forward = ops::layernorm_forward<float>,
    .layernorm_backward = ops::layernorm_backward<float>,
    .gelu_forward = ops::gelu_forward<float>,
    .gelu_backward = ops::gelu_backward<float>,
    .residual_forward = ops::residual_forward<float>,
    .residual_backward = ops::residual_backward<float>,
    .softmax_forward = ops::softmax_forward<float>,
    .relu_forward = ops::relu_forward<float>,
    .relu_backward = ops::relu_backward<float>,
    .softmax_backward = ops::softmax_backward<float>,
    .attention_forward = ops::attention_forward<float>,
    .attention_backward = ops::attention_backward<float>,
    .crossentropy_forward = ops::crossentropy_forward<float>,
    .crossentropy_softmax_backward = ops::crossentropy_softmax_backward<float>,
    .adamw_update = ops::adamw_update,
    .sgd_momentum_update = ops::sgd_momentum_update,
    .lamb_direction = ops::lamb_direction,
    .fill = ops::fill,
    .scale = ops::scale,
    .axpy = ops::axpy,
    .sum_of_squares = ops::sum_of_squares,
    .vocab_slice_encoder_forward = ops::vocab_slice_encoder_forward,
    .vocab_slice_encoder_backward = ops::vocab_slice_encoder_backward,
    .vocab_slice_max = ops::vocab_slice_max,
    .vocab_slice_exp_sums = ops::vocab_slice_exp_sums,
    .vocab_slice_softmax = ops::vocab_slice_softmax,
    .vocab_slice_crossentropy_backward = ops::vocab_slice_crossentropy_backward,
    .attention_block_forward = ops::attention_block_forward,
    .attention_block_delta = ops::attention_block_delta,
    .attention_block_backward = ops::attention_block_backward,
    .copy_columns = ops::copy_columns,
    .gather_rows = ops::gather_rows,
    .scatter_add_rows = ops::scatter_add_rows,
    .row_dots = ops::row_dots,
    .quantize = ops::quantize,
    .dequantize = ops::dequantize,
};
}  // namespace

DeviceKind parse_device(const std::string& name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  if (name == "fenced") return DeviceKind::fenced;
  throw std::invalid_argument("unknown device '" + name + "' (cpu, cuda, fenced)");
}

const Device& device(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return kCpu;
    case DeviceKind::cuda: return cuda_device();
    case DeviceKind::fenced: return fenced_device();
  }
  return kCpu;
}

namespace {
std::atomic<bool> gpu_memory_allocated = false;
}

void note_gpu_memory() { gpu_memory_allocated = true; }

void finish_issued_ops() {
  if (gpu_memory_allocated) cuda_device().synchronize();
}

namespace {
thread_local int issuing = -1;
thread_local HostCopyObserver host_copy_observer = nullptr;
thread_local void* host_copy_context = nullptr;
}  // namespace

void set_issuing_rank(int rank) { issuing = rank; }
int issuing_rank() { return issuing; }

void observe_host_copies(HostCopyObserver observer, void* context) {
  host_copy_observer = observer;
  host_copy_context = context;
}

void note_host_copy(std::size_t bytes, bool to_host) {
  if (host_copy_observer) host_copy_observer(bytes, to_host, host_copy_context);
}

const Device& device_of(const void* p) {
  if (gpu_memory_allocated && p && cuda_device().holds(p)) return cuda_device();
  if (fenced_device().holds(p)) return fenced_device();
  return kCpu;
}

const Device& device_of(const void* a, const void* b) {
  const Device& d = device_of(a);
  return d.kind != DeviceKind::cpu ? d : device_of(b);
}

}  // namespace labkit
