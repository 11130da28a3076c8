// What collective algorithms and the backends' native collectives share: a
// chunk of a buffer split into parts, a local copy, and pooled scratch buffers.
// Below the algorithms, in labkit_comm, since a backend's vendor-library
// stand-in (the simulator's native collectives) needs them too.
#pragma once

#include <cstddef>
#include <memory>

#include "labkit/device.h"
#include "labkit/view.h"

namespace labkit {

// Chunk i of `count` elements split into `parts`: the first count % parts chunks
// hold one element more, so any count splits, divisible or not.
struct Chunk {
  std::size_t offset;
  std::size_t count;
};
Chunk chunk_range(std::size_t count, int parts, int i);

// Helpers the algorithms share. Both respect payload-free views (null data),
// and work where the buffers live: host memory, or a device's (either side).
inline void copy_local(View to, View from) {
  if (to.data && from.data && from.bytes()) device_of(to.data, from.data).copy(to.data, from.data, from.bytes());
}

// Every element of an f32 view set to `value` where it lives: a freed shard's
// NaNs, a shard's zero padding.
void fill_local(View v, float value);

// A temporary buffer of `count` elements of like.dtype: real memory when `like`
// has data, sizes only when the run is payload-free. The memory comes from a
// pool and goes back to it, so an algorithm called in a loop (a benchmark, a
// training step) neither allocates nor faults in fresh pages on every call,
// as NCCL and gloo keep their buffers. It lives on the same device as `like`.
// Its contents start undefined.
class Scratch {
 public:
  Scratch(View like, std::size_t count);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&&) = default;
  View view() const { return view_; }

 private:
  std::shared_ptr<std::byte> memory_;
  std::size_t capacity_ = 0;
  DeviceKind where_ = DeviceKind::cpu;
  View view_;
};

}  // namespace labkit
