// AddressSanitizer and the engine's fibers: the engine runs each rank on a
// stack of its own (a Boost.Context fiber) and tells ASan of each jump between
// stacks (labkit/asan_stacks.h says why), here, where the stacks are known.
#pragma once

#include <cstddef>
#include <deque>

#include <boost/context/fiber.hpp>

#include "labkit/asan_stacks.h"
#include "stack_pool.h"

namespace labkit::sim {

class AsanFibers {
 public:
  struct Stack : asan::Stack {
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
      *where_ = {{static_cast<char*>(s.sp) - s.size, s.size}};
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
    explicit Jump(const Stack& to) { asan::start_switch(&fake_stack_, to); }
    ~Jump() { asan::finish_switch(fake_stack_, nullptr); }
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
      asan::finish_switch(nullptr, &fibers.scheduler_);
    }
    ~InRank() { asan::start_switch(nullptr, fibers_.scheduler_); }
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
    asan::start_switch(&fake_stack, ranks_[rank]);
    fiber = {};
    asan::finish_switch(fake_stack, &self);  // ASan now takes the rank's stack for the current one
    asan::start_switch(&fake_stack, self);
    asan::finish_switch(fake_stack, nullptr);
  }

 private:
  std::deque<Stack> ranks_;  // a deque: an Allocator keeps a pointer into it while fibers are added
  Stack scheduler_;  // the thread's own stack, learnt when a rank first arrives
};

}  // namespace labkit::sim
