// AddressSanitizer and stacks of one's own. ASan keeps one stack per thread;
// a Boost.Context fiber (a simulated rank, backends/sim/asan_fibers.h; a
// kernel's thread on the CPU's CUDA, core/src/cuda_emulation) runs on a stack
// of its own, and unless told of each jump between stacks, ASan takes the
// fiber's frames for the thread's, reports errors that are not there, and at a
// throw clears the wrong memory. Boost says so itself (BOOST_USE_ASAN) in its
// ucontext flavour only, and Debian builds Boost.Context with fcontext (in
// assembly), so labkit tells it: start_switch just before a jump, naming the
// stack it goes to, and finish_switch on arrival, which names the stack it came
// from (<sanitizer/common_interface_defs.h>). Without ASan they do nothing.
#pragma once

#include <cstddef>

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

namespace labkit::asan {

struct Stack {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

// fake_stack: where ASan keeps the frames it moves off the stack left (for
// detect_stack_use_after_return) until the jump back; nullptr: that stack is done with.
inline void start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const Stack& to) {
#ifdef LABKIT_ASAN
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
}

// from: filled with the stack jumped from (nullptr: not wanted).
inline void finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] Stack* from) {
#ifdef LABKIT_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#endif
}

}  // namespace labkit::asan
