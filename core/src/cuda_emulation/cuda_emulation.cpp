// The CPU's CUDA (include/cuda_runtime.h says what it is for): memory from the
// host's allocator, streams that keep their work until it is waited for, and
// kernels run thread by thread on Boost.Context fibers, so that a thread at a
// warp shuffle or a block barrier can wait there while the others of its warp
// or block run up to it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include <boost/context/fiber.hpp>

#include "labkit/asan_stacks.h"

namespace ctx = boost::context;

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace labkit::cuda_emulation {

namespace {

constexpr int kWarp = 32;
constexpr std::size_t kStackBytes = 128 * 1024;

[[noreturn]] void stop(const char* what) {
  std::fprintf(stderr, "cuda (the CPU's emulation): block (%u, %u, %u): %s\n", blockIdx.x, blockIdx.y, blockIdx.z,
               what);
  std::abort();
}

// The fibers' stacks, kept for the next thread: most threads run to their end
// at once, so a kernel without barriers reuses one stack throughout.
std::vector<void*>& free_stacks() {
  thread_local auto* stacks = new std::vector<void*>;  // never destroyed, as the stacks
  return *stacks;
}

// AddressSanitizer is told of each jump between the scheduler's stack and a
// runner's (labkit/asan_stacks.h).
thread_local asan::Stack scheduler_stack;

enum class Waits { not_started, no, at_warp, at_block, returned };

struct Thread {
  Waits waits = Waits::not_started;
  int runner = -1;  // the fiber it runs on
};

// A fiber that runs a block's threads one after another, from the first not yet
// started, until one waits at a barrier: that thread keeps the fiber, and the
// next thread gets a new one. A kernel without barriers takes one fiber a block.
struct Runner {
  ctx::fiber fiber;
  ctx::fiber scheduler;  // the way back, while it runs
  asan::Stack stack;
};

// The order threads start and resume in, and blocks run in: 0 first, or the
// last first (LABKIT_CUDA_THREAD_ORDER=reverse), k-th of n being order(k, n).
bool reverse_order() {
  static const bool reverse = [] {
    const char* order = std::getenv("LABKIT_CUDA_THREAD_ORDER");
    if (!order || std::strcmp(order, "forward") == 0) return false;
    if (std::strcmp(order, "reverse") == 0) return true;
    std::fprintf(stderr, "cuda (the CPU's emulation): LABKIT_CUDA_THREAD_ORDER=%s: expected forward or reverse\n",
                 order);
    std::exit(2);
  }();
  return reverse;
}

int order(int k, int n) { return reverse_order() ? n - 1 - k : k; }

struct Block {
  std::vector<Thread> threads;
  std::deque<Runner> runners;  // a deque: a runner's address holds while more are made
  int next = 0;                // the first thread not started
  int running = -1;            // the thread running now
  // Each lane's value at a shuffle, in two sets used in turn: a lane may write
  // its next shuffle's value while another still reads this one's, but not the
  // one after, which waits for every lane of the warp at the next.
  std::vector<float> shuffled[2];
  std::vector<int> shuffles;  // each thread's count so far, to pick the set
  void (*body)(void*);
  void* context;
};
thread_local Block* block = nullptr;

class PooledStack {
 public:
  explicit PooledStack(asan::Stack* where) : where_(where) {}
  ctx::stack_context allocate() {
    void* base = nullptr;
    if (!free_stacks().empty()) {
      base = free_stacks().back();
      free_stacks().pop_back();
    }
    if (!base) base = std::malloc(kStackBytes);
    if (!base) throw std::bad_alloc();
    *where_ = {base, kStackBytes};
    ctx::stack_context s;
    s.size = kStackBytes;
    s.sp = static_cast<char*>(base) + kStackBytes;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { free_stacks().push_back(static_cast<char*>(s.sp) - s.size); }

 private:
  asan::Stack* where_;
};

dim3 coordinates_of(int i, dim3 size) {
  return dim3(unsigned(i) % size.x, unsigned(i) / size.x % size.y, unsigned(i) / (size.x * size.y));
}

// On a thread's fiber: wait at a barrier until the scheduler lets it go on.
void wait_at(Waits at) {
  Thread& self = block->threads[std::size_t(block->running)];
  self.waits = at;
  Runner& runner = block->runners[std::size_t(self.runner)];
  void* fake_stack = nullptr;
  asan::start_switch(&fake_stack, scheduler_stack);
  runner.scheduler = std::move(runner.scheduler).resume();
  asan::finish_switch(fake_stack, &scheduler_stack);
}

// Runs the thread where it waits, or (i == -1) a new runner from the next thread not started.
void resume(Block& b, int i) {
  if (i >= 0) {
    b.running = i;
    threadIdx = coordinates_of(i, blockDim);
  }
  const int r = i >= 0 ? b.threads[std::size_t(i)].runner : int(b.runners.size());
  if (i < 0) {
    Runner& made = b.runners.emplace_back();
    made.fiber = ctx::fiber(std::allocator_arg, PooledStack(&made.stack), [&b, r](ctx::fiber&& scheduler) {
      Runner& self = b.runners[std::size_t(r)];
      self.scheduler = std::move(scheduler);
      asan::finish_switch(nullptr, &scheduler_stack);
      const int n = int(b.threads.size());
      while (b.next < n) {
        const int t = order(b.next++, n);
        b.threads[std::size_t(t)] = {Waits::no, r};
        b.running = t;
        threadIdx = coordinates_of(t, blockDim);
        b.body(b.context);
        b.threads[std::size_t(t)].waits = Waits::returned;
      }
      asan::start_switch(nullptr, scheduler_stack);  // leaves for good: its stack goes back to the pool
      return std::move(self.scheduler);
    });
  }
  Runner& runner = b.runners[std::size_t(r)];
  void* fake_stack = nullptr;
  asan::start_switch(&fake_stack, runner.stack);
  runner.fiber = std::move(runner.fiber).resume();
  asan::finish_switch(fake_stack, nullptr);
}

// Lets go the threads whose barrier every thread it waits for has reached:
// a warp's lanes at a shuffle or __syncwarp, a block's threads at __syncthreads
// (a returned thread counts as there, as on a GPU). False: none could go.
bool release(Block& b) {
  const int n = int(b.threads.size());
  bool released = false, all_at_block = true, any_at_block = false;
  for (int first = 0; first < n; first += kWarp) {
    const int last = std::min(n, first + kWarp);
    int at_warp = 0, returned = 0;
    for (int i = first; i < last; ++i) {
      const Waits w = b.threads[std::size_t(i)].waits;
      at_warp += w == Waits::at_warp;
      returned += w == Waits::returned;
      any_at_block |= w == Waits::at_block;
      all_at_block &= w == Waits::at_block || w == Waits::returned;
    }
    if (at_warp && returned)
      stop("lanes wait at a shuffle or __syncwarp of the whole warp that a lane of theirs, which has returned, "
           "never reaches");
    if (at_warp && at_warp == last - first) {
      for (int i = first; i < last; ++i) b.threads[std::size_t(i)].waits = Waits::no;
      released = true;
    }
  }
  if (any_at_block && all_at_block) {
    for (Thread& t : b.threads)
      if (t.waits == Waits::at_block) t.waits = Waits::no;
    released = true;
  }
  return released;
}

void run_block(Block& b) {
  const int n = int(b.threads.size());
  for (;;) {
    while (b.next < n) resume(b, -1);
    for (int k = 0; k < n; ++k)
      if (const int i = order(k, n); b.threads[std::size_t(i)].waits == Waits::no) resume(b, i);
    bool all_returned = true;
    for (const Thread& t : b.threads) all_returned &= t.waits == Waits::returned;
    if (all_returned) return;
    if (!release(b)) stop("threads wait at barriers that the others of their warp or block wait at no more");
  }
}

}  // namespace

namespace {

// Each made stream's work not yet run. A made stream's tag is its index + 2
// (cudaStreamLegacy is 1).
using Queue = std::deque<std::function<void()>>;
struct Streams {
  std::mutex lock;
  std::deque<Queue> queued;
};

Streams& streams() {
  static auto* s = new Streams;  // never destroyed: a static tensor may release at exit
  return *s;
}

cudaStream_t tag(std::size_t index) { return reinterpret_cast<cudaStream_t>(index + 2); }

// The stream's queue, or null where cudaStreamCreate did not make it (the legacy stream).
Queue* queue_of(Streams& s, cudaStream_t stream) {
  const std::size_t index = reinterpret_cast<std::uintptr_t>(stream) - 2;
  return index < s.queued.size() ? &s.queued[index] : nullptr;
}

// Runs the stream's work, oldest first, until none is left.
void finish(cudaStream_t stream) {
  for (;;) {
    std::function<void()> work;
    {
      Streams& s = streams();
      std::lock_guard guard(s.lock);
      Queue* queue = queue_of(s, stream);
      if (!queue || queue->empty()) return;
      work = std::move(queue->front());
      queue->pop_front();
    }
    work();
  }
}

// What the legacy stream waits for: every made stream's work, the last made first.
void finish_all() {
  std::size_t made;
  {
    Streams& s = streams();
    std::lock_guard guard(s.lock);
    made = s.queued.size();
  }
  while (made > 0) finish(tag(--made));
}

}  // namespace

void issue(cudaStream_t stream, std::function<void()> work) {
  if (stream == nullptr || stream == cudaStreamLegacy) {
    finish_all();
    work();
    return;
  }
  Streams& s = streams();
  std::lock_guard guard(s.lock);
  Queue* queue = queue_of(s, stream);
  if (!queue) {
    std::fprintf(stderr, "cuda (the CPU's emulation): work issued to %p, which cudaStreamCreate did not make\n",
                 static_cast<void*>(stream));
    std::abort();
  }
  queue->push_back(std::move(work));
}

cudaError_t check_launch(dim3 grid, dim3 size) {
  const unsigned threads = size.x * size.y * size.z;
  return threads == 0 || threads > 1024 || grid.x * grid.y * grid.z == 0 ? cudaErrorInvalidValue : cudaSuccess;
}

void run_grid(dim3 grid, dim3 size, void (*body)(void*), void* context) {
  const unsigned threads = size.x * size.y * size.z;
  Block b;
  b.body = body;
  b.context = context;
  b.shuffled[0].resize(threads);
  b.shuffled[1].resize(threads);
  block = &b;
  blockDim = size;
  gridDim = grid;
  const int blocks = int(grid.x * grid.y * grid.z);
  for (int k = 0; k < blocks; ++k) {
    blockIdx = coordinates_of(order(k, blocks), grid);
    b.threads.assign(threads, Thread{});
    b.runners.clear();
    b.next = 0;
    b.shuffles.assign(threads, 0);
    run_block(b);
  }
  block = nullptr;
}

}  // namespace labkit::cuda_emulation

using namespace labkit::cuda_emulation;

float __shfl_xor_sync(unsigned mask, float value, int lane_mask) {
  if (mask != 0xffffffffu) stop("a shuffle of part of a warp (the emulation does whole warps only)");
  const auto me = std::size_t(block->running);
  std::vector<float>& values = block->shuffled[block->shuffles[me]++ % 2];
  values[me] = value;
  wait_at(Waits::at_warp);
  return values[me ^ std::size_t(lane_mask)];
}

void __syncwarp(unsigned mask) {
  if (mask != 0xffffffffu) stop("a __syncwarp of part of a warp (the emulation does whole warps only)");
  wait_at(Waits::at_warp);
}

void __syncthreads() { wait_at(Waits::at_block); }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  // Aligned as cudaMalloc's, and no larger than asked: a kernel that reads
  // past the end stops under AddressSanitizer.
  constexpr std::size_t kAlign = 256;
  return posix_memalign(p, kAlign, bytes) == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* p) {
  finish_all();  // as CUDA's, it waits for the device's work
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  finish_all();
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!bytes) return cudaSuccess;
  if (kind == cudaMemcpyHostToDevice) {
    // The host's bytes as they are now: the caller may reuse them once this returns.
    std::vector<char> from(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    issue(stream, [dst, from = std::move(from)] { std::memcpy(dst, from.data(), from.size()); });
  } else {
    issue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes) issue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  issue(stream, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  Streams& s = streams();
  std::lock_guard guard(s.lock);
  *stream = tag(s.queued.size());
  s.queued.emplace_back();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy)
    finish_all();
  else
    finish(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  finish_all();
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
  }
  return "unknown error";
}
