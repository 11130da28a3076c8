// The first test of every training lab: N ranks train to the weights one rank
// reaches on the whole batch. They differ only by rounding (the ranks' sums
// run in another order), measured as numpy.linalg.norm compares vectors.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "labkit/gpt.h"
#include "labkit/parallel/sequences.h"

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

// The same over the parts of a and b that `ranges` pick: the parameters a
// pipeline stage keeps.
inline double relative_difference(std::span<const float> a, std::span<const float> b,
                                  std::span<const ParameterRange> ranges) {
  std::vector<float> mine, theirs;
  for (const ParameterRange& r : ranges) {
    mine.insert(mine.end(), a.begin() + std::ptrdiff_t(r.offset), a.begin() + std::ptrdiff_t(r.offset + r.count));
    theirs.insert(theirs.end(), b.begin() + std::ptrdiff_t(r.offset), b.begin() + std::ptrdiff_t(r.offset + r.count));
  }
  return relative_difference(mine, theirs);
}

// What an optimizer does to the parameters it updates, given their gradients.
using OptimizerUpdate = std::function<void(std::span<float> params, std::span<const float> grads)>;

// The reference: one rank, the whole tiny GPT (seeded), `steps` steps on
// `batch` sequences each, drawn from `data` by a sampler over all of it with
// the same seed (so a parallel run's global batches are the same). Returns
// the weights at the end.
std::vector<float> train_one_rank(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                  int batch, const OptimizerUpdate& update);

}  // namespace labkit
