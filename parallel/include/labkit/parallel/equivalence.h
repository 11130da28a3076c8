// The first test of every training lab: N ranks train to the weights one rank
// reaches on the whole batch. They differ only by rounding (the ranks' sums
// run in another order), measured as numpy.linalg.norm compares vectors.
#pragma once

#include <cmath>
#include <span>

namespace labkit {

// ||a - b|| / ||b||, Euclidean norms: the difference relative to the whole vector.
inline double relative_difference(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace labkit
