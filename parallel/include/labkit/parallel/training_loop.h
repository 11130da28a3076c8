// labkit::run_training — the loop every training lab runs (ddp, fsdp, tp,
// pipeline, moe) and the visualizer's MoE scenario with it: on every rank of a
// run, `steps` steps, each giving the rank's loss; the steps' span on rank 0's
// clock; then, on rank 0, every rank's losses, whether the ranks hold the same
// weights, and how far the farthest is from one rank's. What differs from lab
// to lab is the model and what a step does: the rank function the lab hands to
// run_training builds its model and calls RankTraining::steps with its step.
//
//   const TrainingRun run = run_training(run_options, [&](Comm& comm, RankTraining& training) {
//     Gpt model(config, seed);  // the same weights on every rank
//     training.steps(steps, [&](int s) { return one_step(model, s); });
//     training.replicated(model.parameters().to_host());  // data parallelism: alike on every rank
//   });
//
// It lives below the labs, beside equivalence.h's one-rank reference, because
// the visualizer (which does not link the lab library) runs the same loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "labkit/comm.h"
#include "labkit/run.h"

namespace labkit {

// What rank 0 holds after the run; on a process of mpirun that ran another
// rank, nothing (ranks == 0).
struct TrainingRun {
  int ranks = 0;
  std::vector<std::vector<double>> losses;  // each rank's loss by step, in rank order
  double start = 0, end = 0;                // rank 0's steps on its clock (virtual seconds on sim)
  // With RankTraining::replicated: rank 0's weights' fingerprint, and whether
  // every rank's is the same (their weights bit for bit alike).
  std::uint64_t fingerprint = 0;
  bool ranks_agree = false;
  // With RankTraining::versus_one_rank: the largest of the ranks' distances
  // from one rank's weights (relative_difference, equivalence.h).
  double weights_vs_one_rank = 0;
  std::shared_ptr<const Trace> trace;  // every rank's, with run_options.keep_trace or --trace

  bool on_rank_zero() const { return ranks > 0; }
  // The global batch's mean loss by step: each step's losses summed over the
  // ranks (in double, in rank order), then divided by their number.
  std::vector<float> mean_losses() const;
  double seconds_per_step() const { return (end - start) / double(losses[0].size()); }
};

// One rank's part of the run, handed to the lab's rank function.
class RankTraining {
 public:
  RankTraining(Comm& comm, TrainingRun& out, std::optional<std::vector<float>>& one_rank)
      : comm_(comm), out_(out), one_rank_(one_rank) {}
  // Runs step(0), ..., step(count - 1), each returning this rank's loss, and
  // gathers every rank's losses on rank 0 (an instrument: untraced, free of
  // virtual time, so outside what the trace measures).
  void steps(int count, const std::function<double(int step)>& step);
  // Weights every rank must hold bit for bit alike (data parallelism's
  // replicas, FSDP's gathered shards). Ranks agree when their 64-bit
  // fingerprints do: 8 bytes a rank gathered on rank 0, not the whole model,
  // and over the bits, so a run that diverged to the same NaNs on every rank
  // still agrees (its weights are not finite: the comparison with one rank says so).
  void replicated(std::span<const float> weights);
  // This rank's weights' distance from one rank's, where the ranks hold
  // different parts (tensor, pipeline and expert parallelism): rank 0 keeps the largest.
  void versus_one_rank(double difference);
  // One rank's weights to compare with (equivalence.h's reference), trained by
  // `train` once per process, by the first rank to ask, then shared: the
  // simulator's ranks share their process. Asked inside the ranks, after they
  // have started, as all of a lab's work is.
  const std::vector<float>& one_rank(const std::function<std::vector<float>()>& train);

 private:
  Comm& comm_;
  TrainingRun& out_;
  std::optional<std::vector<float>>& one_rank_;
};

using TrainingRankFn = std::function<void(Comm& comm, RankTraining& training)>;

// Runs `rank_fn` on every rank of `run_options`' world.
TrainingRun run_training(const RunOptions& run_options, const TrainingRankFn& rank_fn);

// FNV-1a over the bits of `weights`: equal bits, equal fingerprints.
std::uint64_t fingerprint(std::span<const float> weights);

}  // namespace labkit
