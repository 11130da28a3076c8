#include "labkit/scratch.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

Chunk chunk_range(std::size_t count, int parts, int i) {
  const std::size_t base = count / parts, extra = count % parts, index = i;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

void fill_local(View v, float value) {
  if (!v.data || !v.count) return;
  if (v.dtype != DType::f32)
    throw Error(fmt::format("fill_local: a view of {} {}; it fills f32 views", v.count, name_of(v.dtype)));
  device_of(v.data).fill(static_cast<float*>(v.data), value, long(v.count));
}

// The scratch pool: free buffers by device and capacity. A buffer is held by
// one Scratch at a time, so ranks (fibers on the simulator, threads elsewhere)
// never share one.
namespace {
std::mutex pool_mutex;
std::multimap<std::pair<DeviceKind, std::size_t>, std::shared_ptr<std::byte>> pool;
}  // namespace

Scratch::Scratch(View like, std::size_t count) : view_{nullptr, count, like.dtype} {
  const std::size_t bytes = like.data ? count * size_of(like.dtype) : 0;
  if (bytes == 0) return;
  const Device& d = device_of(like.data);
  where_ = d.kind;
  {
    std::lock_guard lock(pool_mutex);
    if (auto it = pool.lower_bound({where_, bytes}); it != pool.end() && it->first.first == where_) {
      capacity_ = it->first.second;
      memory_ = std::move(it->second);
      pool.erase(it);
    }
  }
  if (!memory_) {
    memory_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(d.allocate(bytes)), [&d](std::byte* p) { d.release(p); });
    capacity_ = bytes;
  }
  view_.data = memory_.get();
}

Scratch::~Scratch() {
  if (!memory_) return;
  std::lock_guard lock(pool_mutex);
  pool.emplace(std::pair(where_, capacity_), std::move(memory_));
}

}  // namespace labkit
