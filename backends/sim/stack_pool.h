// The fibers' stacks, carved from a few large memory maps.
//
// Every rank (and every communication stream) runs on a stack of its own, with a
// guard page below it: a runaway recursion faults there instead of overwriting
// the next stack. Boost's protected_fixedsize_stack maps each stack on its own and
// mprotects its guard page, two memory maps a stack, and Linux gives a process
// vm.max_map_count of them (65530 by default): about 32000 ranks, then a bare
// std::bad_alloc. Here the stacks come from slabs of kStacksPerSlab, one map each,
// [guard][stack][guard][stack]..., and each guard page is installed with
// madvise(MADV_GUARD_INSTALL) (Linux 6.13), which marks the page without
// splitting the map, so the ranks' count is bounded by memory alone. An older
// kernel lacks it: the guard page is then mprotected, the limit holds again, and
// reaching it is an error that names it.
#pragma once

#include <cstddef>
#include <vector>

#include <boost/context/stack_context.hpp>

namespace labkit::sim {

class StackPool {
 public:
  explicit StackPool(std::size_t stack_bytes);
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  // As Boost's stack allocators: sp is the stack's top, size its usable bytes (the guard page lies below).
  boost::context::stack_context allocate();
  void deallocate(boost::context::stack_context& stack) noexcept;  // kept for the next fiber

  static constexpr std::size_t kStacksPerSlab = 256;

 private:
  void add_slab();
  void guard(char* page);

  std::size_t stack_bytes_, page_bytes_;
  std::vector<char*> slabs_;
  std::vector<char*> free_;  // the tops of stacks no fiber holds
  std::size_t carved_ = 0;   // stacks handed out of the last slab
  std::size_t stacks_ = 0;   // stacks carved in all
};

}  // namespace labkit::sim
