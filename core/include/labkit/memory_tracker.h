// What a rank holds in memory, by what it is for (the memory lab's categories),
// counted as the program says it allocates and frees: current and peak bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace labkit {

// gathered: parameters a sharded rank holds whole only while they compute (a
// ZeRO-3 / FSDP unit between its all-gather and its free); prefetched: a unit
// whose all-gather was issued early, from then until it computes.
enum class MemoryUse { weights, gradients, optimizer, activations, gathered, prefetched };
inline constexpr std::array kMemoryUses = {MemoryUse::weights,     MemoryUse::gradients, MemoryUse::optimizer,
                                           MemoryUse::activations, MemoryUse::gathered,  MemoryUse::prefetched};
std::string_view name_of(MemoryUse use);

struct MemoryTracker {
  std::array<std::int64_t, kMemoryUses.size()> current{}, peak{};
  std::int64_t peak_total = 0;

  void change(MemoryUse use, std::int64_t bytes);  // positive: allocated; negative: freed
  std::int64_t total() const;
};

}  // namespace labkit
