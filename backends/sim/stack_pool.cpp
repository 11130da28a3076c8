#include "stack_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <sanitizer/asan_interface.h>  // ASAN_UNPOISON_MEMORY_REGION: nothing without ASan

#include "labkit/error.h"

namespace labkit::sim {

namespace {
#ifdef MADV_GUARD_INSTALL
constexpr int kGuardInstall = MADV_GUARD_INSTALL;
#else
constexpr int kGuardInstall = 102;  // <linux/mman.h> from Linux 6.13
#endif

long max_map_count() {
  long count = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> count;
  return count;
}
}  // namespace

StackPool::StackPool(std::size_t stack_bytes) : stack_bytes_(stack_bytes), page_bytes_(sysconf(_SC_PAGESIZE)) {}

StackPool::~StackPool() {
  for (char* slab : slabs_) munmap(slab, kStacksPerSlab * (page_bytes_ + stack_bytes_));
}

// Reserved, not committed (MAP_NORESERVE): a stack takes memory only for the pages its fiber touches.
void StackPool::add_slab() {
  const std::size_t bytes = kStacksPerSlab * (page_bytes_ + stack_bytes_);
  void* slab = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (slab == MAP_FAILED)
    throw Error(fmt::format("sim: the stacks of fibers {} to {} (ranks and their streams): mmap of {} bytes: {} "
                            "(each rank needs its stack's address space: fewer --ranks, or a larger ulimit -v)",
                            stacks_, stacks_ + kStacksPerSlab - 1, bytes, std::strerror(errno)));
  slabs_.push_back(static_cast<char*>(slab));
  carved_ = 0;
}

void StackPool::guard(char* page) {
  if (madvise(page, page_bytes_, kGuardInstall) == 0) return;
  if (errno != EINVAL)
    throw Error(fmt::format("sim: the stack of fiber {} (ranks and their streams): madvise(MADV_GUARD_INSTALL) of "
                            "its guard page: {}", stacks_, std::strerror(errno)));
  if (mprotect(page, page_bytes_, PROT_NONE) == 0) return;  // a kernel before 6.13: a map of its own
  const std::string why = std::strerror(errno);
  const long maps = max_map_count();
  throw Error(fmt::format("sim: the stack of fiber {} (ranks and their streams): mprotect of its guard page: {}; "
                          "this kernel has no MADV_GUARD_INSTALL (Linux 6.13), so every guard page is a memory map "
                          "of its own, and a process may hold vm.max_map_count = {}: about {} ranks fit; run fewer "
                          "or raise it (sysctl -w vm.max_map_count=N)",
                          stacks_, why, maps, maps / 2));
}

boost::context::stack_context StackPool::allocate() {
  boost::context::stack_context stack;
  stack.size = stack_bytes_;
  if (!free_.empty()) {
    stack.sp = free_.back();
    free_.pop_back();
    ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(stack.sp) - stack_bytes_, stack_bytes_);  // the last fiber's frames
    return stack;
  }
  if (slabs_.empty() || carved_ == kStacksPerSlab) add_slab();
  char* const bottom = slabs_.back() + carved_ * (page_bytes_ + stack_bytes_);
  guard(bottom);
  ++carved_;
  ++stacks_;
  stack.sp = bottom + page_bytes_ + stack_bytes_;
  return stack;
}

void StackPool::deallocate(boost::context::stack_context& stack) noexcept {
  free_.push_back(static_cast<char*>(stack.sp));
}

}  // namespace labkit::sim
