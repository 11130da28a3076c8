// labkit::run_training: the loop the training labs share. What reaches rank 0
// (every rank's losses, the steps' span, whether the ranks agree, the largest
// distance from one rank) is what their tables and verdicts print.
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "labkit/parallel/training_loop.h"

namespace labkit {
namespace {

RunOptions sim_ranks(int ranks) {
  RunOptions o;
  o.ranks = ranks;
  return o;
}

TEST(TrainingLoop, EveryRanksLossesReachRankZeroInRankOrder) {
  const TrainingRun run = run_training(sim_ranks(3), [](Comm& comm, RankTraining& training) {
    training.steps(2, [&](int s) { return 10.0 * comm.rank() + s; });
  });
  EXPECT_EQ(run.ranks, 3);
  EXPECT_EQ(run.losses, (std::vector<std::vector<double>>{{0, 1}, {10, 11}, {20, 21}}));
  EXPECT_EQ(run.mean_losses(), (std::vector<float>{10, 11}));
}

TEST(TrainingLoop, TheSpanIsTheStepsOnRankZerosClockAndNothingAfter) {
  double after_steps = 0;
  const TrainingRun run = run_training(sim_ranks(2), [&](Comm& comm, RankTraining& training) {
    training.steps(4, [&](int) {
      comm.compute_flops("step", 1e9);
      return 0.0;
    });
    if (comm.rank() == 0) after_steps = comm.now();
    comm.compute_flops("after the steps", 1e12);
  });
  EXPECT_GT(run.end, run.start);
  EXPECT_EQ(run.end, after_steps);
  EXPECT_EQ(run.seconds_per_step(), (run.end - run.start) / 4);
}

// Agreement is over the bits: one ulp apart, or -0 against +0, differs; the
// same NaN on every rank (a run that diverged alike) agrees.
bool ranks_agree(const std::function<std::vector<float>(int rank)>& weights_of) {
  return run_training(sim_ranks(4), [&](Comm& comm, RankTraining& training) {
           training.replicated(weights_of(comm.rank()));
         }).ranks_agree;
}

TEST(TrainingLoop, RanksAgreeWhenEveryRanksWeightsHaveTheSameBits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(ranks_agree([](int) { return std::vector<float>{1, 2}; }));
  EXPECT_TRUE(ranks_agree([&](int) { return std::vector<float>{1, nan}; }));
  EXPECT_FALSE(ranks_agree([](int r) { return std::vector<float>{1, r == 3 ? std::nextafter(2.0f, 3.0f) : 2.0f}; }));
  EXPECT_FALSE(ranks_agree([](int r) { return std::vector<float>{1, r == 1 ? -0.0f : 0.0f}; }));
}

TEST(TrainingLoop, TheFingerprintIsRankZerosWeights) {
  const std::vector<float> mine{3, 1, 4};
  const TrainingRun run = run_training(sim_ranks(2), [&](Comm&, RankTraining& training) { training.replicated(mine); });
  EXPECT_EQ(run.fingerprint, fingerprint(mine));
  EXPECT_NE(fingerprint(mine), fingerprint(std::vector<float>{3, 4, 1}));
}

TEST(TrainingLoop, RankZeroKeepsTheLargestDistanceFromOneRank) {
  const TrainingRun run = run_training(sim_ranks(4), [](Comm& comm, RankTraining& training) {
    training.versus_one_rank(comm.rank() == 2 ? 0.5 : 0.25);
  });
  EXPECT_EQ(run.weights_vs_one_rank, 0.5);
}

// The simulator's ranks share their process, and with it one reference.
TEST(TrainingLoop, OneRankIsTrainedOncePerProcessAndSharedByItsRanks) {
  int trained = 0;
  std::vector<float> seen[4];
  run_training(sim_ranks(4), [&](Comm& comm, RankTraining& training) {
    seen[comm.rank()] = training.one_rank([&] { return std::vector<float>{float(++trained)}; });
  });
  EXPECT_EQ(trained, 1);
  for (const std::vector<float>& reference : seen) EXPECT_EQ(reference, std::vector<float>{1});
}

}  // namespace
}  // namespace labkit
