// The fenced device: CI's stand-in for a GPU, on a machine without one. Its
// memory is host memory that the host cannot touch: one reservation of address
// space with no access (PROT_NONE), carved into allocations 256 bytes apart (as
// cudaMalloc aligns them), and opened for reading and writing only while one of
// the device's own ops runs (the CPU's kernels, the same arithmetic bit for
// bit). So the mistakes that pass on the CPU and crash on a GPU (a host loop
// over a tensor's data(), a memcpy, a span handed to a host optimizer, a
// transport delivering with memcpy) stop the program here, with a message
// naming the allocation and the access; and an op handed host memory says which
// op and which argument. An op opens all of the device's memory, as a kernel on
// a GPU can reach all of it: two mprotect calls an op, over 2 MiB pages where
// the kernel gives them (a virtual machine may trap every first touch of a page
// after an mprotect, so 4 KiB pages cost 512 times the traps). Still slow on
// purpose: for tests, not benchmarks.
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
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit {

namespace {

constexpr std::size_t kAlignment = 256;                    // cudaMalloc's
constexpr std::size_t kHugePage = std::size_t(2) << 20;     // a transparent huge page of x86-64 and arm64
constexpr std::size_t kReserved = std::size_t(64) << 30;    // address space, not memory: a page costs once touched
constexpr std::size_t kLeastReserved = std::size_t(1) << 30;  // where a limit on address space (ulimit -v) allows less

struct Allocation {
  std::uint64_t id;   // the device's n-th allocation, from 1
  std::size_t bytes;  // what was asked for
  std::size_t block;  // what it holds of the reservation: bytes rounded up to kAlignment, or a released block reused
};

// The reservation, its live allocations by first byte, and its released blocks.
// The fault handler reads it too, so it takes the lock only if it is free (a
// fault inside the registry is not a host access to fenced memory, and must not
// deadlock). Never destroyed: a static pool (Scratch's) may give its memory back
// after main returns.
struct Registry {
  std::mutex lock;
  char* memory = nullptr;  // `reserved` bytes, reserved on the first allocation
  std::size_t reserved = 0;
  std::size_t carved = 0;  // its first bytes, handed out so far
  std::size_t mapped = 0;  // carved rounded up to whole huge pages: what an op opens
  int opened = 0;          // ops running now
  std::map<std::uintptr_t, Allocation> allocations;
  std::multimap<std::size_t, std::uintptr_t> released;  // blocks to reuse, by size
  std::uint64_t made = 0;
};
Registry& registry = *new Registry;
std::atomic<bool> any_allocated = false;

bool in_reservation(const void* p) {
  const auto at = reinterpret_cast<std::uintptr_t>(p), first = reinterpret_cast<std::uintptr_t>(registry.memory);
  return registry.memory && at >= first && at < first + registry.reserved;
}

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

// Under registry.lock.
void protect(char* first, std::size_t bytes, int access) {
  if (bytes > 0 && mprotect(first, bytes, access) != 0)
    throw Error(fmt::format("fenced device: mprotect of {} bytes of its memory failed: {}", bytes,
                            std::strerror(errno)));
}
void open_memory() {
  if (registry.opened == 0) protect(registry.memory, registry.mapped, PROT_READ | PROT_WRITE);
  ++registry.opened;
}
void close_memory() {
  if (--registry.opened == 0) protect(registry.memory, registry.mapped, PROT_NONE);
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
  if (a || in_reservation(info->si_addr)) {
    char message[320];
#if defined(__x86_64__)  // the page fault's error code: bit 1 set on a write
    const char* access = static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2 ? "wrote to" : "read from";
#else
    const char* access = "touched";
#endif
    constexpr const char* kHow =
        "device memory is read through the device (Tensor::to_host, Device::copy_to_host), not by host code";
    const int n =
        a ? std::snprintf(message, sizeof message,
                          "fenced device: the host %s fenced allocation #%llu (%zu bytes) at byte %zu, outside the "
                          "device's ops: %s\n",
                          access, static_cast<unsigned long long>(a->id), a->bytes,
                          std::size_t(reinterpret_cast<std::uintptr_t>(info->si_addr) - base), kHow)
          : std::snprintf(message, sizeof message,
                          "fenced device: the host %s fenced memory at %p that no live allocation holds (released?), "
                          "outside the device's ops: %s\n",
                          access, info->si_addr, kHow);
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

// Under registry.lock. kReserved, or half as much again and again down to
// kLeastReserved where the process's address space is limited. The reservation
// is madvised for huge pages: without them (THP off) everything works, four
// KiB at a time.
void reserve() {
  for (std::size_t bytes = kReserved; bytes >= kLeastReserved; bytes /= 2) {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    madvise(p, bytes, MADV_HUGEPAGE);
    registry.memory = static_cast<char*>(p);
    registry.reserved = bytes;
    return;
  }
  throw Error(fmt::format("fenced device: reserving even {} GiB of address space failed: {} (is it limited, "
                          "ulimit -v?)", kLeastReserved >> 30, std::strerror(errno)));
}

// A released block of at most twice the size is reused (zeroed, as allocate
// promises); otherwise the next bytes of the reservation, zero as mapped.
void* fenced_allocate(std::size_t bytes) {
  install_fault_handler();
  const std::size_t block = (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  const std::lock_guard lock(registry.lock);
  if (!registry.memory) reserve();
  char* p = nullptr;
  std::size_t held = block;
  if (const auto reuse = registry.released.lower_bound(block);
      reuse != registry.released.end() && reuse->first <= 2 * block) {
    p = reinterpret_cast<char*>(reuse->second);
    held = reuse->first;
    registry.released.erase(reuse);
    open_memory();
    std::memset(p, 0, bytes);
    close_memory();
  } else {
    if (registry.carved + block > registry.reserved)
      throw Error(fmt::format("fenced device: allocating {} bytes: its {} GiB of address space are used up{}", bytes,
                              registry.reserved >> 30,
                              registry.reserved < kReserved ? " (the most the address space's limit allowed)" : ""));
    p = registry.memory + registry.carved;
    registry.carved += block;
    const std::size_t mapped = (registry.carved + kHugePage - 1) / kHugePage * kHugePage;
    if (registry.opened > 0)  // an op running now reaches the new pages too
      protect(registry.memory + registry.mapped, mapped - registry.mapped, PROT_READ | PROT_WRITE);
    registry.mapped = mapped;
  }
  registry.allocations.emplace(reinterpret_cast<std::uintptr_t>(p), Allocation{++registry.made, bytes, held});
  any_allocated = true;
  return p;
}

void fenced_release(void* p) {
  const std::lock_guard lock(registry.lock);
  const auto it = registry.allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == registry.allocations.end()) return;
  registry.released.emplace(it->second.block, it->first);
  registry.allocations.erase(it);
}

bool fenced_holds(const void* p) {
  if (!any_allocated || !p) return false;
  const std::lock_guard lock(registry.lock);
  return find(p) != nullptr;
}

// An op's run: its pointer arguments checked, then the device's memory open
// while it lives. `host_allowed`: the argument positions that may be host
// memory (a copy's host side); any other pointer that is not a live fenced
// allocation is refused by name.
class Opened {
 public:
  template <class... Args>
  Opened(const char* op, std::initializer_list<int> host_allowed, Args... args) {
    const std::lock_guard lock(registry.lock);
    int position = 0;
    (check_argument(op, host_allowed, ++position, args), ...);
    open_memory();
  }
  ~Opened() {
    const std::lock_guard lock(registry.lock);
    close_memory();
  }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;

 private:
  template <class T>
  static void check_argument(const char* op, std::initializer_list<int> host_allowed, int position, T argument) {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>) {  // memory, not code
      if (!argument || find(argument)) return;
      if (in_reservation(argument))
        throw Error(fmt::format("fenced device: {} was handed memory the device has released, as its argument {} "
                                "({})", op, position, static_cast<const void*>(argument)));
      if (std::find(host_allowed.begin(), host_allowed.end(), position) != host_allowed.end()) return;
      throw Error(fmt::format("fenced device: {} was handed host memory as its argument {} ({}): its ops run on "
                              "the device's memory (copy the buffer there first)", op, position,
                              static_cast<const void*>(argument)));
    }
  }
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
