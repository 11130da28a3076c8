// The first test of every training lab: N ranks train to the weights one rank
// reaches on the whole batch. They differ only by rounding (the ranks' sums
// run in another order), measured as numpy.linalg.norm compares vectors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "labkit/gpt.h"
#include "labkit/parallel/sequences.h"

namespace labkit {

// ||a - b|| / ||b||, Euclidean norms: the difference relative to the whole
// vector. Infinite where either holds a NaN or an infinity: a run that diverged
// is never equal to anything, and std::max over stages or ranks keeps it.
inline double relative_difference(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  const double relative = std::sqrt(diff / norm);
  return std::isfinite(diff) && std::isfinite(norm) && !std::isnan(relative) ? relative
                                                                             : std::numeric_limits<double>::infinity();
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

// A verdict's criterion that failed, in its words: "weights 1.2e-03 from one
// rank's, past 9.0e-04", or "weights not finite: the run diverged (lower --lr)".
inline std::string failed_criterion(std::string_view what, double difference, double limit) {
  if (!std::isfinite(difference)) return fmt::format("{} not finite: the run diverged (lower --lr)", what);
  return fmt::format("{} {:.1e} from one rank's, past {:.1e}", what, difference, limit);
}

// The reference: one rank, the whole tiny GPT (seeded), `steps` steps on
// `batch` sequences each, drawn from `data` by a sampler over all of it with
// the same seed (so a parallel run's global batches are the same), stepped by
// SGD with momentum at `lr` (labkit::SgdMomentum): the optimizer the
// tensor-parallel, pipeline and MoE GPTs train with; on `where`, the ranks'
// device (the same kernels as theirs). Returns the weights at the end.
std::vector<float> train_one_rank_sgd(const GptConfig& config, const Sequences& data, std::uint64_t seed, int steps,
                                      int batch, float lr, DeviceKind where = DeviceKind::cpu);

// The same loop on a model the caller built (on any device), stepped by an
// optimizer that takes the whole model (LARS and LAMB read its layers);
// returns its first step's gradients beside its last weights. `reversed`
// takes each batch's sequences in reverse order: the same sums over the batch,
// in another order (rounding_limit). `micro_steps`
// splits each batch into that many forwards and backwards whose gradients add
// up (accumulation): N simulated ranks' kernels, each on batch / N, on one.
struct OneRankRun {
  std::vector<float> first_grads, weights;
};
OneRankRun train_one_rank(Gpt& model, const Sequences& data, std::uint64_t seed, int steps, int batch,
                          const std::function<void(Gpt&)>& update, bool reversed = false, int micro_steps = 1);

// How far a parallel run may land from one rank's weights, given how far the
// reference lands from itself when only the order of its sums changes
// (`reordered`: relative_difference of a reversed run against the reference).
// N ranks sum their shards, then the shards' sums: another order again, so
// their distance is of that size, whatever it grows to over the run. With SGD
// it stays near float's 6e-8; AdamW and LAMB divide each step by sqrt(v), so a
// gradient element that nearly cancels moves its weight a full step either
// way, and the more steps and the higher the rate, the further (1e-6 to 1e-3
// on the tiny GPT). kRoundingMargin over it, and never below 1e-6.
inline constexpr double kRoundingMargin = 10;
inline double rounding_limit(double reordered) {
  return std::isfinite(reordered) ? std::max(kRoundingMargin * reordered, 1e-6) : 0.0;
}

}  // namespace labkit
