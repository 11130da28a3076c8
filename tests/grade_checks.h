// What every grade test needs: inputs that depend on rank and index (so a block
// delivered to the wrong place shows), and the first mismatch in the learner's terms.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace labkit::grade {

using Buffers = std::vector<std::vector<float>>;  // one per rank

inline float input(int rank, std::size_t i) { return float((rank + 1) * 1000 + i % 1000); }

inline std::vector<float> inputs(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input(rank, i);
  return v;
}

// "rank 2, element 5 (block 1, element 1 of it): expected 3005, got 1005", or "" if none.
inline std::string first_mismatch(const Buffers& got, std::size_t n,
                                  const std::function<float(int, std::size_t)>& expected, std::size_t block = 0) {
  for (int r = 0; r < int(got.size()); ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (i >= got[r].size() || got[r][i] != expected(r, i)) {
        const std::string where = block ? fmt::format(" (block {}, element {} of it)", i / block, i % block) : "";
        return fmt::format("rank {}, element {}{}: expected {}, got {}", r, i, where, expected(r, i),
                           i < got[r].size() ? fmt::format("{}", got[r][i]) : "nothing");
      }
  return "";
}

}  // namespace labkit::grade
