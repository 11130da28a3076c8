#include "labkit/device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

namespace {
// The host memory this process holds, checked as its tensors grow. On the
// simulator every rank's tensors live in one process, so a run of many ranks can
// outgrow the machine: the kernel would kill it without a word, or the machine
// would crawl in swap. It stops with an error instead, before the process holds
// more than it did when its first tensor was made plus nine tenths of what the
// machine had available then (MemAvailable, or a cgroup's limit where lower).
// The resident size is read from /proc each time the tensors grow by 64 MB more.
std::atomic<std::size_t> host_bytes_held = 0;

std::size_t resident_bytes() {
  std::size_t pages = 0, resident = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages >> resident;
  return resident * std::size_t(sysconf(_SC_PAGESIZE));
}

// What this process held when first asked, and what it may grow to: that and
// the machine's available memory then.
struct HostBudget {
  std::size_t resident_at_start = 0, limit = std::numeric_limits<std::size_t>::max();
};
const HostBudget& host_budget() {
  static const HostBudget budget = [] {
    HostBudget b{.resident_at_start = resident_bytes()};
    std::size_t available = 0;
    std::ifstream meminfo("/proc/meminfo");
    for (std::string line; std::getline(meminfo, line);)
      if (std::size_t kib = 0; std::sscanf(line.c_str(), "MemAvailable: %zu kB", &kib) == 1) available = kib << 10;
    if (available == 0) return b;  // not Linux: unchecked
    std::size_t cgroup_max = 0, cgroup_used = 0;
    std::ifstream max("/sys/fs/cgroup/memory.max"), current("/sys/fs/cgroup/memory.current");
    if (max >> cgroup_max && current >> cgroup_used)
      available = std::min(available, cgroup_max > cgroup_used ? cgroup_max - cgroup_used : 0);
    b.limit = b.resident_at_start + available / 10 * 9;  // a tenth left to the rest of the machine
    return b;
  }();
  return budget;
}

std::atomic<int> process_rank = -1;

[[noreturn]] void host_memory_refused(std::size_t bytes, std::string_view why) {
  // The simulator's ranks share this process; under mpirun a process is one rank.
  const int simulated = issuing_rank(), rank = simulated >= 0 ? simulated : process_rank.load();
  throw Error(fmt::format("{}: host memory: {:.1f} MB more for a tensor, where the tensors of this process hold "
                          "{:.2f} GB: {} ({})",
                          rank >= 0 ? fmt::format("rank {}", rank) : std::string("this process"), bytes / 1e6,
                          host_bytes_held.load() / 1e9, why,
                          simulated >= 0 ? "simulate fewer --ranks, a smaller --batch or model, or ask --what-if, "
                                           "which moves sizes only"
                                         : "a smaller --batch or model"));
}

void check_host_memory(std::size_t bytes) {
  constexpr std::size_t kCheckEvery = 64 << 20;
  static std::atomic<std::size_t> next_check = 0;
  const std::size_t held = host_bytes_held.load() + bytes;
  if (held < next_check.load()) return;
  next_check = held + kCheckEvery;
  // Zeroed pages a tensor has not written yet are not resident: its bytes count in full.
  const HostBudget& budget = host_budget();
  if (std::max(resident_bytes() + bytes, budget.resident_at_start + held) > budget.limit)
    host_memory_refused(bytes, fmt::format("the process would pass {:.2f} GB, what this machine had for it when "
                                           "its tensors began",
                                           budget.limit / 1e9));
}

// Zeroed host memory. A buffer of 2 MiB or more is asked to live in 2 MiB pages
// (transparent huge pages): 512 times fewer pages for the TLB to map and for a
// transport to look up. Open MPI's shared-memory transport copies a large
// message straight between processes (CMA), walking the pages of both buffers;
// on a 2-core host that took a 16 MiB allreduce from 4-5 GB/s busbw to 8-9
// (book chapter 80). Linux's default is huge pages only where madvise asks.
void* host_allocate(std::size_t bytes) {
  constexpr std::size_t kHugePage = 2 << 20;
  const std::size_t rounded = bytes < kHugePage ? bytes : (bytes + kHugePage - 1) / kHugePage * kHugePage;
  check_host_memory(rounded);
  void* p = bytes < kHugePage ? std::calloc(bytes ? bytes : 1, 1) : std::aligned_alloc(kHugePage, rounded);
  if (!p) host_memory_refused(rounded, "the allocation failed");
  host_bytes_held += malloc_usable_size(p);
  if (bytes < kHugePage) return p;
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB, which is only slower
  std::memset(p, 0, rounded);
  return p;
}
void host_release(void* p) {
  host_bytes_held -= malloc_usable_size(p);
  std::free(p);
}
void host_copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
void host_zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }

constexpr Device kCpu = {
    .kind = DeviceKind::cpu,
    .name = "cpu",
    .allocate = host_allocate,
    .release = host_release,
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
void set_process_rank(int rank) { process_rank = rank; }

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
