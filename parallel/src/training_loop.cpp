#include "labkit/parallel/training_loop.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "labkit/output.h"

namespace labkit {

std::vector<float> TrainingRun::mean_losses() const {
  std::vector<float> out;
  for (std::size_t s = 0; s < losses[0].size(); ++s) {
    double sum = 0;
    for (const std::vector<double>& rank_losses : losses) sum += rank_losses[s];
    out.push_back(float(sum / double(losses.size())));
  }
  return out;
}

void RankTraining::steps(int count, const std::function<double(int step)>& step) {
  std::vector<double> losses;
  const double start = comm_.now();
  for (int s = 0; s < count; ++s) {
    // Rank 0 speaks for the run on a terminal: a large batch's steps take minutes on a laptop.
    if (comm_.rank() == 0) progress_line(fmt::format("  step {} of {}", s + 1, count));
    losses.push_back(step(s));
  }
  if (comm_.rank() == 0) progress_line("");
  const double end = comm_.now();
  const std::vector<std::vector<double>> all = comm_.gather_objects(losses);
  if (comm_.rank() != 0) return;
  out_.ranks = comm_.size();
  out_.losses = all;
  out_.start = start, out_.end = end;
}

void RankTraining::replicated(std::span<const float> weights) {
  const std::uint64_t mine = fingerprint(weights);
  const std::vector<std::uint64_t> all = comm_.gather_object(mine);
  if (comm_.rank() != 0) return;
  out_.fingerprint = mine;
  out_.ranks_agree = std::all_of(all.begin(), all.end(), [&](std::uint64_t f) { return f == mine; });
}

void RankTraining::versus_one_rank(double difference) {
  const std::vector<double> all = comm_.gather_object(difference);
  if (comm_.rank() != 0) return;
  for (double d : all) out_.weights_vs_one_rank = std::max(out_.weights_vs_one_rank, d);
}

const std::vector<float>& RankTraining::one_rank(const std::function<std::vector<float>()>& train) {
  if (!one_rank_) {
    progress_line("  training one rank, the reference to compare with");
    one_rank_ = train();
    progress_line("");
  }
  return *one_rank_;
}

TrainingRun run_training(const RunOptions& run_options, const TrainingRankFn& rank_fn) {
  TrainingRun out;
  std::optional<std::vector<float>> one_rank;  // this process's
  const RunResult result = run(run_options, [&](Comm& comm) {
    RankTraining training(comm, out, one_rank);
    rank_fn(comm, training);
  });
  out.trace = result.trace;
  return out;
}

std::uint64_t fingerprint(std::span<const float> weights) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a's offset basis and prime, over each float's 32 bits
  for (float f : weights) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

}  // namespace labkit
