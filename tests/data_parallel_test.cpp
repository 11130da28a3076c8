// parallel/sampler and parallel/data_parallel: DistributedSampler's shards and
// padding, and the data-parallel step's buckets starting under backward.
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/nccl_model.h"
#include "labkit/optim.h"
#include "labkit/parallel/data_parallel.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/sampler.h"

using namespace labkit;
using labkit::test::simulate;

TEST(DistributedSampler, ShardsAreDisjointAndTogetherTheEpoch) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    std::multiset<std::size_t> seen;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<std::size_t> mine = DistributedSampler(96, ranks, r, 7).indices(0);
      EXPECT_EQ(mine.size(), 96u / ranks);
      seen.insert(mine.begin(), mine.end());
    }
    for (std::size_t i = 0; i < 96; ++i) EXPECT_EQ(seen.count(i), 1u) << ranks << " ranks: sample " << i;
  }
}

TEST(DistributedSampler, PadsByRepeatingTheFirstIndicesAndDealsThemRoundRobin) {
  // 10 samples over 4 ranks: 3 each, the epoch's first 2 indices repeated at its end.
  const std::vector<std::size_t> epoch = DistributedSampler(10, 1, 0, 5).indices(2);
  for (int r = 0; r < 4; ++r) {
    const DistributedSampler sampler(10, 4, r, 5);
    EXPECT_EQ(sampler.per_rank(), 3u);
    EXPECT_EQ(sampler.padding(), 2u);
    const std::vector<std::size_t> padded = {epoch[0], epoch[1], epoch[2], epoch[3], epoch[4], epoch[5],
                                             epoch[6], epoch[7], epoch[8], epoch[9], epoch[0], epoch[1]};
    EXPECT_EQ(sampler.indices(2), (std::vector<std::size_t>{padded[r], padded[r + 4], padded[r + 8]})) << "rank " << r;
  }
  // More ranks than samples: the epoch repeats as often as it takes.
  EXPECT_EQ(DistributedSampler(2, 5, 4, 0, false).indices(0), (std::vector<std::size_t>{0}));
}

TEST(DistributedSampler, EachEpochIsAnotherSeededShuffle) {
  const DistributedSampler a(64, 2, 1, 3), b(64, 2, 1, 3);
  EXPECT_EQ(a.indices(4), b.indices(4));
  EXPECT_NE(a.indices(4), a.indices(5));
  EXPECT_NE(a.indices(0), DistributedSampler(64, 2, 1, 4).indices(0));
}

TEST(DistributedSampler, GlobalBatchIsTheSameSetOnAnyRankCount) {
  // Step s on P ranks with B/P each reads what one rank reads with B. 72 / 12 =
  // 6 steps an epoch: step 7 is in the second. 70 samples make 5 whole batches
  // of 12; the ranks' padded shards of 18 would make 6 of 3 each, the sixth
  // repeating two samples, which one rank never reads: step 5 begins epoch 1.
  // In 3 micro-steps a step is one rank's batch of 36: 2 steps an epoch of 72,
  // 1 of 70 (counted in micro-batches of 12, the epochs would end elsewhere).
  const int batch = 12;
  for (int micro_steps : {1, 3})
    for (std::size_t samples : {72, 70})
      for (int step : {0, 1, 3, 5, 7}) {
        std::vector<std::size_t> one = batch_of(DistributedSampler(samples, 1, 0, 9), step, batch * micro_steps), many;
        for (int r = 0; r < 4; ++r)
          for (int m = 0; m < micro_steps; ++m) {
            const std::vector<std::size_t> part =
                batch_of(DistributedSampler(samples, 4, r, 9), step, batch / 4, m, micro_steps);
            many.insert(many.end(), part.begin(), part.end());
          }
        std::sort(one.begin(), one.end());
        std::sort(many.begin(), many.end());
        EXPECT_EQ(one, many) << samples << " samples, step " << step << ", " << micro_steps << " micro-steps";
      }
}

TEST(DataParallel, OverlapStartsTheFirstBucketBeforeBackwardEnds) {
  const GptConfig config = gpt_preset("tiny-gpt", 16);
  std::vector<int> x(2 * config.max_seq), y(2 * config.max_seq);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = int(i % 16), y[i] = int((i + 1) % 16);
  for (DdpMode mode : kDdpModes) {
    auto run = simulate(2, [&](Comm& c) {
      Gpt model(config, 1);
      // Small caps: a bucket per block or so (the tiny GPT's blocks are 196 KiB of gradients each).
      DataParallel ddp(c, model, mode, {.first_bytes = 16 << 10, .bytes = 64 << 10});
      ddp.forward_backward(x, y, 2, config.max_seq);
      if (mode != DdpMode::naive) {
        EXPECT_GE(ddp.buckets().size(), 3u);
      }
    });
    double backward_ends = 0, first_comm = 1e30;
    for (const TraceEvent& e : run.trace->tracks()[0].events) {
      if (e.kind == TraceEvent::Kind::compute && e.name == "backward") backward_ends = std::max(backward_ends, e.end);
      if (e.kind == TraceEvent::Kind::collective) first_comm = std::min(first_comm, e.start);
    }
    if (mode == DdpMode::overlap)
      EXPECT_LT(first_comm, backward_ends) << "overlap: a bucket's allreduce starts while backward still runs";
    else
      EXPECT_GE(first_comm, backward_ends) << name_of(mode) << ": the allreduces start after backward";
  }
}

// Reading the loss waits for the device. A step reads it once its forward,
// backward and averaging are queued, so a GPU is not left idle while the host
// waits, and simulated ranks sharing one GPU queue their steps side by side.
TEST(DataParallel, ReadsTheLossOnlyOnceTheStepIsQueued) {
  const GptConfig config = gpt_preset("tiny-gpt", 16);
  std::vector<int> x(2 * config.max_seq), y(2 * config.max_seq);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = int(i % 16), y[i] = int((i + 1) % 16);
  for (DdpMode mode : kDdpModes) {
    auto run = simulate(2, [&](Comm& c) {
      Gpt model(config, 1, DeviceKind::fenced);
      DataParallel ddp(c, model, mode, {.first_bytes = 16 << 10, .bytes = 64 << 10});
      EXPECT_GT(ddp.forward_backward(x, y, 2, config.max_seq), 0.0f);
    });
    const test::HostReads reads = test::host_reads_of(*run.trace, 0);
    ASSERT_EQ(reads.at.size(), 1u) << name_of(mode) << ": the loss, and nothing else, comes to the host";
    EXPECT_GE(reads.at[0], reads.work_ends) << name_of(mode) << ": the loss is read after backward and the averaging";
  }
}

// The bench's baseline: one rank running N ranks' kernels one after another
// trains what one batch does, to rounding, and a batch that does not split is refused.
TEST(OneRank, MicroStepsAccumulateToTheWholeBatch) {
  const GptConfig config = gpt_preset("tiny-gpt", 16);
  const Sequences data = training_sequences(1, config.max_seq);
  const auto train = [&](int micro_steps) {
    Gpt model(config, 1, DeviceKind::fenced);
    SgdMomentum sgd{.lr = 1e-2f};
    return train_one_rank(model, data, 1, 3, 8, [&](Gpt& m) { sgd.update(m.parameters(), m.gradients()); }, false,
                          micro_steps);
  };
  const OneRankRun whole = train(1), accumulated = train(4);
  EXPECT_LT(relative_difference(accumulated.first_grads, whole.first_grads), 1e-6);
  EXPECT_LT(relative_difference(accumulated.weights, whole.weights), 1e-6);
  EXPECT_GT(relative_difference(accumulated.first_grads, whole.first_grads), 0.0) << "the same sums in another order";
  EXPECT_THROW(train(3), std::invalid_argument);
}

TEST(MetaModel, HoldsEveryParameterAndSpendsTheStepAThirdForward) {
  for (const char* name : {"llama2-7b", "gpt2-xl", "mixtral-8x7b"}) {
    const memory::Architecture arch = memory::model_preset(name);
    const MetaModel m = meta_model(arch, 3.0);
    EXPECT_EQ(double(m.parameters()), memory::count_parameters(arch).total) << name;
    // The head and final norm, each layer's tensors, the embeddings.
    ASSERT_EQ(m.pieces.size(), arch.layers * memory::layer_tensors(arch, 0).size() + 2) << name;
    double backward = 0;
    for (const MetaModel::Piece& p : m.pieces) backward += p.backward_seconds;
    EXPECT_DOUBLE_EQ(m.forward_seconds, 1.0) << name;
    EXPECT_NEAR(backward, 2.0, 1e-9) << name;
  }
}

TEST(MetaModel, NaiveStepTakesComputePlusOneAllReduceAndOverlapHidesAllButTheLastBucket) {
  const MetaModel m = meta_model(memory::model_preset("llama2-7b"), 2.0);
  const std::uint64_t grads = m.parameters() * 2;
  auto step = [&](DdpMode mode) {
    return simulate(8, [&](Comm& c) { meta_step(c, m, mode); }, "ib-ndr", false).elapsed;
  };
  const double one_all_reduce = simulate(8, [&](Comm& c) {
    c.all_reduce(meta_view(grads / 2, DType::bf16), ReduceOp::avg);
  }, "ib-ndr", false).elapsed;
  EXPECT_NEAR(one_all_reduce, 2.0 * 7 / 8 * double(grads) / 50e9, 1e-3);  // Day 64's formula, and the link's alpha
  EXPECT_NEAR(step(DdpMode::naive), 2.0 + one_all_reduce, 1e-9);
  // Overlapped: the embeddings' bucket (32000 x 4096 bf16) starts after the last compute.
  const double last_bucket = 2.0 * 7 / 8 * 32000.0 * 4096 * 2 / 50e9;
  EXPECT_NEAR(step(DdpMode::overlap), 2.0 + last_bucket, 0.1 * last_bucket);
}

// The overhead model of overlapped buckets against the simulator: k equal
// buckets, ready evenly through backward, on a uniform cluster (one GPU per
// node). Both regimes: communication keeping up with backward (the last
// bucket's allreduce exposed) and falling behind (k calls' latency exposed).
// Each bucket's allreduce costs what NCCL's tuning model gives its size (the
// line of the algorithm and protocol NCCL picks there).
TEST(BucketOverheadModel, PredictsTheSimulatedExposedCommunication) {
  const int p = 8;
  const NcclSystem ib_ndr = nccl_system(find_topology("ib-ndr"), p, p);
  const std::size_t gradient_bytes = std::size_t(1) << 30;
  for (double backward : {0.05, 0.02})  // G b = 37.6 ms: hidden, then not
    for (int k : {4, 16, 64}) {
      const NcclEstimate call = nccl_choice(Collective::all_reduce, gradient_bytes / 2 / k * 2, ib_ndr);
      const AllReduceLine line{call.latency, 1 / call.bandwidth};
      MetaModel m;
      for (int i = 0; i < k; ++i) m.pieces.push_back({gradient_bytes / 2 / k, backward / k});
      const double step = simulate(p, [&](Comm& c) {
        meta_step(c, m, DdpMode::overlap, {.first_bytes = 1, .bytes = 1});  // a bucket per piece
      }, "ib-ndr", false).elapsed;
      const double model = exposed_communication(k, backward, double(gradient_bytes), line);
      EXPECT_NEAR(step - backward, model, 1e-6 * backward) << "T_bwd " << backward << " s, " << k << " buckets";
    }
}

TEST(BucketOverheadModel, BestBucketCountIsTheModelsMinimum) {
  const AllReduceLine line{4e-3, 1.0 / 25e9};  // 1024 ranks of ib-ndr
  for (double backward : {1.33, 0.6, 0.3})     // G b = 0.54 s: communication fits, barely, and does not
    for (double gradient_bytes : {13.5e9, 1e9}) {
      const double best = best_bucket_count(backward, gradient_bytes, line);
      double least = exposed_communication(1, backward, gradient_bytes, line);
      for (int k = 2; k <= 100000; ++k) least = std::min(least, exposed_communication(k, backward, gradient_bytes, line));
      // The continuous optimum is at most the best whole count, which is next to it.
      EXPECT_LE(exposed_communication(best, backward, gradient_bytes, line), least * (1 + 1e-12));
      EXPECT_EQ(std::min(exposed_communication(std::floor(best), backward, gradient_bytes, line),
                         exposed_communication(std::ceil(best), backward, gradient_bytes, line)), least)
          << "T_bwd " << backward << " s, G " << gradient_bytes << ", k* " << best;
    }
}
