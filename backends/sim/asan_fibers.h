// AddressSanitizer and the engine's fibers.
//
// ASan keeps one stack per thread. The engine runs each rank on a stack of its
// own (a Boost.Context fiber) and jumps between stacks; unless told of each
// jump, ASan takes a rank's frames for the thread's, reports errors that are not
// there, and at a throw clears the wrong memory. Boost says so itself
// (BOOST_USE_ASAN) in its ucontext flavour only, and Debian builds Boost.Context
// with fcontext (jump_fcontext, in assembly), so the engine does it here:
// __sanitizer_start_switch_fiber just before a jump, naming the stack it goes
// to, and __sanitizer_finish_switch_fiber on arrival, which names the stack it
// came from (<sanitizer/common_interface_defs.h>). Without ASan it is all empty.
#pragma once

#include <cstddef>
#include <deque>

#include <boost/context/fiber.hpp>

#include "stack_pool.h"

#if defined(__SANITIZE_ADDRESS__)
#define LABKIT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LABKIT_ASAN 1
#endif
#endif
#ifdef LABKIT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace labkit::sim {

class AsanFibers {
 public:
  struct Stack {
    const void* bottom = nullptr;
    std::size_t size = 0;
    bool entered = false;  // a rank's: its fiber has run (InRank)
  };

  explicit AsanFibers(int ranks) : ranks_(ranks) {}
  // One more fiber (a rank's communication stream), numbered after the others.
  void add() { ranks_.emplace_back(); }

  // A stack from the pool for one rank, noting where the stack lies.
  class Allocator {
   public:
    Allocator(StackPool& stacks, Stack* where) : stacks_(&stacks), where_(where) {}
    boost::context::stack_context allocate() {
      boost::context::stack_context s = stacks_->allocate();
      *where_ = {static_cast<char*>(s.sp) - s.size, s.size};
      return s;
    }
    void deallocate(boost::context::stack_context& s) noexcept { stacks_->deallocate(s); }

   private:
    StackPool* stacks_;
    Stack* where_;
  };
  Allocator allocator(int rank, StackPool& stacks) { return {stacks, &ranks_.at(rank)}; }

  // A jump and the way back, while in scope: the scheduler resuming a rank, or a
  // rank yielding to the scheduler. The way back is noted in the destructor, so
  // it holds when resume() throws (Boost unwinds a fiber it destroys that way).
  class Jump {
   public:
    explicit Jump(const Stack& to) { start(&fake_stack_, to); }
    ~Jump() { finish(fake_stack_, nullptr); }
    Jump(const Jump&) = delete;
    Jump& operator=(const Jump&) = delete;

   private:
    void* fake_stack_ = nullptr;  // ASan's frames for detect_stack_use_after_return
  };
  Jump to_rank(int rank) { return Jump(ranks_.at(rank)); }
  Jump to_scheduler() { return Jump(scheduler_); }

  // The whole of a rank's fiber function: it arrives on the rank's stack (the
  // scheduler started that jump) and, returning or unwound, leaves it for good.
  class InRank {
   public:
    InRank(AsanFibers& fibers, int rank) : fibers_(fibers) {
      fibers.ranks_.at(rank).entered = true;
      finish(nullptr, &fibers.scheduler_);
    }
    ~InRank() { start(nullptr, fibers_.scheduler_); }
    InRank(const InRank&) = delete;
    InRank& operator=(const InRank&) = delete;

   private:
    AsanFibers& fibers_;
  };

  // Destroys a rank's fiber, unwinding its stack. One that never ran unwinds
  // inside Boost, where no InRank notes the arrival or the way back, so the
  // scheduler ends the jump itself and then jumps back to its own stack.
  void destroy(boost::context::fiber& fiber, int rank) {
    if (!fiber) return;
    if (ranks_.at(rank).entered) {
      const Jump jump(ranks_[rank]);
      fiber = {};
      return;
    }
    void* fake_stack = nullptr;
    Stack self;
    start(&fake_stack, ranks_[rank]);
    fiber = {};
    finish(fake_stack, &self);  // ASan now takes the rank's stack for the current one
    start(&fake_stack, self);
    finish(fake_stack, nullptr);
  }

 private:
  static void start([[maybe_unused]] void** fake_stack, [[maybe_unused]] const Stack& to) {
#ifdef LABKIT_ASAN
    __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
  }
  static void finish([[maybe_unused]] void* fake_stack, [[maybe_unused]] Stack* from) {
#ifdef LABKIT_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#endif
  }

  std::deque<Stack> ranks_;  // a deque: an Allocator keeps a pointer into it while fibers are added
  Stack scheduler_;  // the thread's own stack, learnt when a rank first arrives
};

}  // namespace labkit::sim
