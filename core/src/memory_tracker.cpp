#include "labkit/memory_tracker.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace labkit {

std::string_view name_of(MemoryUse use) {
  constexpr std::array names = {"weights", "gradients", "optimizer", "activations", "gathered", "prefetched"};
  return names[std::size_t(use)];
}

void MemoryTracker::change(MemoryUse use, std::int64_t bytes) {
  std::int64_t& now = current[std::size_t(use)];
  if (now + bytes < 0)
    throw std::invalid_argument("memory: freeing " + std::to_string(-bytes) + " bytes of " +
                                std::string(name_of(use)) + " with only " + std::to_string(now) + " held");
  now += bytes;
  peak[std::size_t(use)] = std::max(peak[std::size_t(use)], now);
  peak_total = std::max(peak_total, total());
}

std::int64_t MemoryTracker::total() const { return std::accumulate(current.begin(), current.end(), std::int64_t(0)); }

}  // namespace labkit
