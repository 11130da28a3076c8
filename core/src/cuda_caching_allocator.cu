// A caching allocator, as PyTorch's CUDACachingAllocator keeps one: cudaFree
// waits for the whole device to go idle, and cudaMalloc takes tens of
// microseconds, so a training step that uploads its tokens into a fresh tensor
// and frees it would stall the GPU at every step (and once per simulated rank).
// Freed blocks are kept by size and handed out again, on the stream that
// allocated them (each simulated rank's, cuda_streams.cu), as PyTorch keeps a
// pool per stream: a block freed there may be reused there at once, its next
// user's kernels running after its last user's. Other ranks touch it only by
// the copies and reductions on the legacy stream, which that stream's later
// work waits for.
#include "cuda_caching_allocator.h"

#include "labkit/asan_stacks.h"  // LABKIT_ASAN: built with AddressSanitizer

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_support.h"

#if defined(LABKIT_CUDA_EMULATION) && defined(LABKIT_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace labkit::cuda_memory {

namespace {

// On the CPU's CUDA under AddressSanitizer (the asan build), device memory is
// the host's, and what a GPU would run past unnoticed is stopped: the bytes a
// block has past its request, and a block back in the cache, are poisoned, so
// a kernel reading past its tensor, or a tensor used after its release, stops
// there, as a read past cudaMalloc's bytes does. In the block's stream's order,
// as its kernels run: work issued before a release may still use the block.
// Elsewhere these do nothing.
#if defined(LABKIT_CUDA_EMULATION) && defined(LABKIT_ASAN)
struct Bytes {
  void* p;
  std::size_t n;
};
void poison_now(void* bytes) {
  auto* b = static_cast<Bytes*>(bytes);
  ASAN_POISON_MEMORY_REGION(b->p, b->n);
  delete b;
}
void unpoison_now(void* bytes) {
  auto* b = static_cast<Bytes*>(bytes);
  ASAN_UNPOISON_MEMORY_REGION(b->p, b->n);
  delete b;
}
#endif

void poison([[maybe_unused]] cudaStream_t stream, [[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) {
#if defined(LABKIT_CUDA_EMULATION) && defined(LABKIT_ASAN)
  check_cuda(cudaLaunchHostFunc(stream, poison_now, new Bytes{p, bytes}), "cudaLaunchHostFunc");
#endif
}

void unpoison([[maybe_unused]] cudaStream_t stream, [[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) {
#if defined(LABKIT_CUDA_EMULATION) && defined(LABKIT_ASAN)
  check_cuda(cudaLaunchHostFunc(stream, unpoison_now, new Bytes{p, bytes}), "cudaLaunchHostFunc");
#endif
}

// Sizes round up to 512 bytes (PyTorch's smallest block), so nearly equal
// requests share a free list.
constexpr std::size_t kRound = 512;
std::size_t rounded(std::size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

struct Block {
  std::size_t bytes;
  cudaStream_t stream;  // where it was made, and goes back to when freed
};

struct Cache {
  std::mutex lock;
  std::map<std::uintptr_t, Block> blocks;  // every block ever made, by base
  std::map<std::pair<cudaStream_t, std::size_t>, std::vector<void*>> free_by_size;
};

Cache& cache() {
  // Never destroyed: a tensor held by a static (a pooled scratch buffer) is
  // released by its destructor at exit, which may run after this one's.
  static Cache* c = new Cache;
  return *c;
}

}  // namespace

void* allocate(std::size_t bytes) {
  const std::size_t size = rounded(bytes ? bytes : 1);
  const cudaStream_t on = cuda_launch::stream();
  Cache& c = cache();
  void* p = nullptr;
  {
    std::lock_guard guard(c.lock);
    std::vector<void*>& free = c.free_by_size[{on, size}];
    if (!free.empty()) {
      p = free.back();
      free.pop_back();
    }
  }
  if (!p) {
    check_cuda(cudaMalloc(&p, size), "cudaMalloc");
    std::lock_guard guard(c.lock);
    c.blocks.emplace(reinterpret_cast<std::uintptr_t>(p), Block{size, on});
  }
  unpoison(on, p, size);
  check_cuda(cudaMemsetAsync(p, 0, size, on), "cudaMemsetAsync");
  poison(on, static_cast<char*>(p) + bytes, size - bytes);
  return p;
}

void release(void* p) {
  if (!p) return;
  Cache& c = cache();
  std::lock_guard guard(c.lock);
  const auto block = c.blocks.find(reinterpret_cast<std::uintptr_t>(p));
  if (block == c.blocks.end()) {  // a tensor's deleter calls this, and must not throw: say so and keep going
    std::fprintf(stderr, "cuda: release of %p, which this allocator did not allocate; ignored\n", p);
    return;
  }
  poison(block->second.stream, p, block->second.bytes);
  c.free_by_size[{block->second.stream, block->second.bytes}].push_back(p);
}

bool holds(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  Cache& c = cache();
  std::lock_guard guard(c.lock);
  auto after = c.blocks.upper_bound(address);
  if (after == c.blocks.begin()) return false;
  const auto& [base, block] = *std::prev(after);
  return address < base + block.bytes;
}

}  // namespace labkit::cuda_memory
