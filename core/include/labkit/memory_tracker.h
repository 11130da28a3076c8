// What a rank holds in memory, by what it is for (the memory lab's categories),
// counted as the program says it allocates and frees: current and peak bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace labkit {

enum class MemoryUse { weights, gradients, optimizer, activations };
inline constexpr std::array kMemoryUses = {MemoryUse::weights, MemoryUse::gradients, MemoryUse::optimizer,
                                           MemoryUse::activations};
std::string_view name_of(MemoryUse use);

struct MemoryTracker {
  std::array<std::int64_t, kMemoryUses.size()> current{}, peak{};
  std::int64_t peak_total = 0;

  void change(MemoryUse use, std::int64_t bytes);  // positive: allocated; negative: freed
  std::int64_t total() const;
};

}  // namespace labkit
