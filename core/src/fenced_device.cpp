// The fenced device: CI's stand-in for a GPU, on a machine without one. Its
// memory is host memory that the host cannot touch: each allocation is its own
// mapping with no access (PROT_NONE), opened for reading and writing only while
// one of the device's own ops runs on it (the CPU's kernels, the same
// arithmetic bit for bit). So the mistakes that pass on the CPU and crash on a
// GPU (a host loop over a tensor's data(), a memcpy, a span handed to a host
// optimizer, a transport delivering with memcpy) stop the program here, with a
// message naming the allocation and the access; and an op handed host memory
// says which op and which argument. Slow on purpose (two mprotect calls per
// buffer per op): for tests, not benchmarks.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit {

namespace {

struct Allocation {
  std::uint64_t id;       // the device's n-th allocation, from 1
  std::size_t bytes;      // what was asked for
  std::size_t mapped;     // rounded up to whole pages
  int opened = 0;         // ops running on it now (an op may name it twice)
};

// Every live allocation by its first byte. The fault handler reads it too, so
// it takes the lock only if it is free (a fault inside the registry is not a
// host access to fenced memory, and must not deadlock). Never destroyed: a
// static pool (Scratch's) may give its memory back after main returns.
struct Registry {
  std::mutex lock;
  std::map<std::uintptr_t, Allocation> allocations;
  std::uint64_t made = 0;
};
Registry& registry = *new Registry;
std::atomic<bool> any_allocated = false;

// The allocation holding `p`, or null. Under registry.lock.
Allocation* find(const void* p, std::uintptr_t* base = nullptr) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = registry.allocations.upper_bound(at);
  if (it == registry.allocations.begin()) return nullptr;
  --it;
  if (at >= it->first + std::max<std::size_t>(it->second.bytes, 1)) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

void protect(std::uintptr_t base, const Allocation& a, int access) {
  if (mprotect(reinterpret_cast<void*>(base), a.mapped, access) != 0)
    throw Error(fmt::format("fenced device: mprotect of allocation #{} failed: {}", a.id, std::strerror(errno)));
}

// SIGSEGV on fenced memory: name the allocation, the byte and the access, then
// die as the fault would have. Any other fault goes to the handler before ours.
struct sigaction previous_handler;

void on_fault(int signal, siginfo_t* info, void* context) {
  std::uintptr_t base = 0;
  const Allocation* a = nullptr;
  if (registry.lock.try_lock()) {
    a = find(info->si_addr, &base);
    registry.lock.unlock();
  }
  if (a) {
    char message[320];
#if defined(__x86_64__)  // the page fault's error code: bit 1 set on a write
    const char* access = static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2 ? "wrote to" : "read from";
#else
    const char* access = "touched";
#endif
    const int n = std::snprintf(
        message, sizeof message,
        "fenced device: the host %s fenced allocation #%llu (%zu bytes) at byte %zu, outside the device's ops: "
        "device memory is read through the device (Tensor::to_host, Device::copy_to_host), not by host code\n",
        access, static_cast<unsigned long long>(a->id), a->bytes,
        std::size_t(reinterpret_cast<std::uintptr_t>(info->si_addr) - base));
    if (n > 0) [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message, std::size_t(n));
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  if (previous_handler.sa_flags & SA_SIGINFO) return previous_handler.sa_sigaction(signal, info, context);
  if (previous_handler.sa_handler != SIG_DFL && previous_handler.sa_handler != SIG_IGN)
    return previous_handler.sa_handler(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction handler {};
    handler.sa_sigaction = on_fault;
    handler.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&handler.sa_mask);
    sigaction(SIGSEGV, &handler, &previous_handler);
  });
}

void* fenced_allocate(std::size_t bytes) {
  install_fault_handler();
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // zero-filled, as allocate promises
  if (p == MAP_FAILED) throw std::bad_alloc();
  const std::lock_guard lock(registry.lock);
  registry.allocations.emplace(reinterpret_cast<std::uintptr_t>(p), Allocation{++registry.made, bytes, mapped});
  any_allocated = true;
  return p;
}

void fenced_release(void* p) {
  const std::lock_guard lock(registry.lock);
  const auto it = registry.allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == registry.allocations.end()) return;
  munmap(p, it->second.mapped);
  registry.allocations.erase(it);
}

bool fenced_holds(const void* p) {
  if (!any_allocated || !p) return false;
  const std::lock_guard lock(registry.lock);
  return find(p) != nullptr;
}

// The allocations an op's pointer arguments point into, open while it lives.
// `host_allowed`: the argument positions that may be host memory (a copy's
// host side); any other pointer that is not fenced memory is refused by name.
class Opened {
 public:
  template <class... Args>
  Opened(const char* op, std::initializer_list<int> host_allowed, Args... args) {
    try {
      int position = 0;
      (open_argument(op, host_allowed, ++position, args), ...);
    } catch (...) {
      close();
      throw;
    }
  }
  ~Opened() { close(); }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;

 private:
  template <class T>
  void open_argument(const char* op, std::initializer_list<int> host_allowed, int position, T argument) {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>) {  // memory, not code
      if (!argument) return;
      const std::lock_guard lock(registry.lock);
      std::uintptr_t base = 0;
      Allocation* a = find(argument, &base);
      if (!a) {
        if (std::find(host_allowed.begin(), host_allowed.end(), position) != host_allowed.end()) return;
        throw Error(fmt::format("fenced device: {} was handed host memory as its argument {} ({}): its ops run on "
                                "the device's memory (copy the buffer there first)", op, position,
                                static_cast<const void*>(argument)));
      }
      if (a->opened++ == 0) protect(base, *a, PROT_READ | PROT_WRITE);
      opened_.push_back(base);
    }
  }
  void close() {
    const std::lock_guard lock(registry.lock);
    for (const std::uintptr_t base : opened_)
      if (const auto it = registry.allocations.find(base); it != registry.allocations.end() && --it->second.opened == 0)
        protect(base, it->second, PROT_NONE);
    opened_.clear();
  }
  std::vector<std::uintptr_t> opened_;
};

// An op of the CPU's table run with its buffers opened: `run_opened<name, op>`
// has op's own signature, so it fills the same slot of the Device table.
template <std::size_t N> struct OpName {
  char text[N];
  constexpr OpName(const char (&name)[N]) { std::copy_n(name, N, text); }
};
template <OpName name, auto op, class R, class... Args> R run_opened(Args... args) {
  const Opened opened(name.text, {}, args...);
  return op(args...);
}
template <OpName name, auto op, class R, class... Args> constexpr auto opened_op(R (*)(Args...)) {
  return &run_opened<name, op, R, Args...>;
}
template <OpName name, auto op> constexpr auto opened = opened_op<name, op>(op);

void fenced_copy_from_host(void* dst, const void* src, std::size_t bytes) {
  const Opened opened("copy_from_host", {2}, dst, src);
  std::memcpy(dst, src, bytes);
  note_host_copy(bytes, false);
}
void fenced_copy_to_host(void* dst, const void* src, std::size_t bytes) {
  const Opened opened("copy_to_host", {1}, dst, src);
  std::memcpy(dst, src, bytes);
  note_host_copy(bytes, true);
}
// Within the device, or between it and the host either way (as cudaMemcpyDefault).
void fenced_copy(void* dst, const void* src, std::size_t bytes) {
  const Opened opened("copy", {fenced_holds(src) ? 1 : 2}, dst, src);
  std::memcpy(dst, src, bytes);
}
void fenced_zero(void* p, std::size_t bytes) {
  const Opened opened("zero", {}, p);
  std::memset(p, 0, bytes);
}

constexpr Device kFenced = {
    .kind = DeviceKind::fenced,
    .name = "fenced",
    .allocate = fenced_allocate,
    .release = fenced_release,
    .copy_from_host = fenced_copy_from_host,
    .copy_to_host = fenced_copy_to_host,
    .zero = fenced_zero,
    .synchronize = [] {},
    .holds = fenced_holds,
    .copy = fenced_copy,
    .reduce = opened<"reduce", reduce_on_host>,
    .divide = opened<"divide", divide_on_host>,
    .encoder_forward = opened<"encoder_forward", ops::encoder_forward<float>>,
    .encoder_backward = opened<"encoder_backward", ops::encoder_backward<float>>,
    .matmul_forward = opened<"matmul_forward", ops::matmul_forward<float>>,
    .matmul_backward = opened<"matmul_backward", ops::matmul_backward<float>>,
    .layernorm_forward = opened<"layernorm_forward", ops::layernorm_forward<float>>,
    .layernorm_backward = opened<"layernorm_backward", ops::layernorm_backward<float>>,
    .gelu_forward = opened<"gelu_forward", ops::gelu_forward<float>>,
    .gelu_backward = opened<"gelu_backward", ops::gelu_backward<float>>,
    .residual_forward = opened<"residual_forward", ops::residual_forward<float>>,
    .residual_backward = opened<"residual_backward", ops::residual_backward<float>>,
    .softmax_forward = opened<"softmax_forward", ops::softmax_forward<float>>,
    .relu_forward = opened<"relu_forward", ops::relu_forward<float>>,
    .relu_backward = opened<"relu_backward", ops::relu_backward<float>>,
    .softmax_backward = opened<"softmax_backward", ops::softmax_backward<float>>,
    .attention_forward = opened<"attention_forward", ops::attention_forward<float>>,
    .attention_backward = opened<"attention_backward", ops::attention_backward<float>>,
    .crossentropy_forward = opened<"crossentropy_forward", ops::crossentropy_forward<float>>,
    .crossentropy_softmax_backward =
        opened<"crossentropy_softmax_backward", ops::crossentropy_softmax_backward<float>>,
    .adamw_update = opened<"adamw_update", ops::adamw_update>,
    .sgd_momentum_update = opened<"sgd_momentum_update", ops::sgd_momentum_update>,
    .lamb_direction = opened<"lamb_direction", ops::lamb_direction>,
    .fill = opened<"fill", ops::fill>,
    .scale = opened<"scale", ops::scale>,
    .axpy = opened<"axpy", ops::axpy>,
    .sum_of_squares = opened<"sum_of_squares", ops::sum_of_squares>,
    .vocab_slice_encoder_forward = opened<"vocab_slice_encoder_forward", ops::vocab_slice_encoder_forward>,
    .vocab_slice_encoder_backward = opened<"vocab_slice_encoder_backward", ops::vocab_slice_encoder_backward>,
    .vocab_slice_max = opened<"vocab_slice_max", ops::vocab_slice_max>,
    .vocab_slice_exp_sums = opened<"vocab_slice_exp_sums", ops::vocab_slice_exp_sums>,
    .vocab_slice_softmax = opened<"vocab_slice_softmax", ops::vocab_slice_softmax>,
    .vocab_slice_crossentropy_backward =
        opened<"vocab_slice_crossentropy_backward", ops::vocab_slice_crossentropy_backward>,
    .attention_block_forward = opened<"attention_block_forward", ops::attention_block_forward>,
    .attention_block_delta = opened<"attention_block_delta", ops::attention_block_delta>,
    .attention_block_backward = opened<"attention_block_backward", ops::attention_block_backward>,
    .copy_columns = opened<"copy_columns", ops::copy_columns>,
    .gather_rows = opened<"gather_rows", ops::gather_rows>,
    .scatter_add_rows = opened<"scatter_add_rows", ops::scatter_add_rows>,
    .row_dots = opened<"row_dots", ops::row_dots>,
    .quantize = opened<"quantize", ops::quantize>,
    .dequantize = opened<"dequantize", ops::dequantize>,
};

}  // namespace

const Device& fenced_device() { return kFenced; }

}  // namespace labkit
