// parallel/fully_sharded: ZeRO's stages 0-3 train the tiny GPT to the weights
// one rank reaches on the whole batch, keep only their shard, and send 2N or
// 3N parameters' worth per step.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/fully_sharded.h"
#include "labkit/parallel/quantize.h"
#include "labkit/parallel/quantized_reduce_scatter.h"
#include "labkit/parallel/mesh.h"

using namespace labkit;
using labkit::test::SimRun;
using labkit::test::simulate;

namespace {

const GptConfig kConfig = gpt_preset("tiny-gpt", 16);
constexpr int kBatch = 24, kSteps = 3;

// Step s's global batch: kBatch sequences of T tokens and their next tokens.
std::vector<int> tokens(int step, int shift) {
  std::vector<int> t(std::size_t(kBatch) * kConfig.max_seq);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = int((i * 7 + i / 5 + step * 3 + shift) % 16);
  return t;
}

// Rows [first, first + rows) of a global batch.
std::vector<int> rows_of(const std::vector<int>& all, int first, int rows) {
  const auto T = std::size_t(kConfig.max_seq);
  return {all.begin() + std::ptrdiff_t(first * T), all.begin() + std::ptrdiff_t((first + rows) * T)};
}

// One rank on the whole batch, SGD with momentum: what every stage must reach.
std::vector<float> one_rank_weights() {
  Gpt model(kConfig, 5);
  SgdMomentum sgd{.lr = 0.05f};
  for (int s = 0; s < kSteps; ++s) {
    model.forward(tokens(s, 0), tokens(s, 1), kBatch, kConfig.max_seq);
    model.zero_grad();
    model.backward();
    sgd.update({model.parameters().data(), model.parameter_count()},
               {model.gradients().data(), model.parameter_count()});
  }
  return model.parameters().to_host();
}

// `ranks` ranks train kSteps steps at `stage` on their rows of each global
// batch; every rank's gathered weights at the end, and rank 0's padding.
struct ShardedRun {
  std::vector<std::vector<float>> weights;
  std::size_t padding = 0;
};
ShardedRun train_sharded(int ranks, int stage, ShardingOptions options = {}, const std::string& topology = "dgx-h100") {
  ShardedRun out{std::vector<std::vector<float>>(ranks)};
  simulate(ranks, [&](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, stage, options);
    SgdMomentum sgd{.lr = 0.05f};
    const int rows = kBatch / ranks;
    for (int s = 0; s < kSteps; ++s) {
      zero.forward_backward(rows_of(tokens(s, 0), c.rank() * rows, rows), rows_of(tokens(s, 1), c.rank() * rows, rows),
                            rows, kConfig.max_seq);
      zero.step([&](View w, View g) { sgd.update(w, g); });
    }
    out.weights[c.rank()] = zero.gather_parameters();
    if (c.rank() == 0)
      for (const FullyShardedGpt::Unit& u : zero.units()) out.padding += u.layout.padding();
  }, topology);
  return out;
}

}  // namespace

TEST(ShardLayout, PadsTheRunToAMultipleOfTheRanks) {
  const ShardLayout a = shard_layout(10, 4), b = shard_layout(8, 4), c = shard_layout(1, 8);
  EXPECT_EQ(a.shard, 3u);
  EXPECT_EQ(a.padded(), 12u);
  EXPECT_EQ(a.padding(), 2u);
  EXPECT_EQ(b.padding(), 0u);
  EXPECT_EQ(c.shard, 1u);
  EXPECT_EQ(c.padding(), 7u);
}

TEST(FullyShardedGpt, EveryStageTrainsTheTinyGptAsOneRankDoes) {
  const std::vector<float> want = one_rank_weights();
  for (int ranks : {1, 2, 3, 4, 8})
    for (int stage = 0; stage <= 3; ++stage) {
      const ShardedRun run = train_sharded(ranks, stage);
      const std::vector<std::vector<float>>& got = run.weights;
      const std::size_t padding = run.padding;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_LE(relative_difference(got[r], want), 1e-6) << "stage " << stage << ", " << ranks << " ranks, rank " << r;
        EXPECT_EQ(got[r], got[0]) << "stage " << stage << ", " << ranks << " ranks: rank " << r << " differs";
      }
      if (ranks == 3) {
        EXPECT_GT(padding, 0u) << "a count that does not divide by 3 is padded";
      }
    }
}

// HSDP: sharded within groups of G, replicated across them; the same weights
// as one rank (and padding where a unit does not divide by G).
// As data parallelism's step (data_parallel_test): the loss comes to the host
// once, after the step's compute and collectives are queued.
TEST(FullyShardedGpt, ReadsTheLossOnlyOnceTheStepIsQueued) {
  for (int stage = 0; stage <= 3; ++stage) {
    const SimRun run = simulate(2, [&](Comm& c) {
      Gpt model(kConfig, 5, DeviceKind::fenced);
      FullyShardedGpt zero(c, model, stage);
      const int rows = kBatch / 2;
      EXPECT_GT(zero.forward_backward(rows_of(tokens(0, 0), c.rank() * rows, rows),
                                      rows_of(tokens(0, 1), c.rank() * rows, rows), rows, kConfig.max_seq),
                0.0f);
    });
    const test::HostReads reads = test::host_reads_of(*run.trace, 0);
    ASSERT_EQ(reads.at.size(), 1u) << "stage " << stage << ": the loss, and nothing else, comes to the host";
    EXPECT_GE(reads.at[0], reads.work_ends) << "stage " << stage << ": the loss is read after backward and the reductions";
  }
}

TEST(FullyShardedGpt, HybridShardingTrainsAsOneRankDoes) {
  const std::vector<float> want = one_rank_weights();
  for (const auto& [ranks, group] : std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {8, 2}, {8, 4}})
    for (int stage = 1; stage <= 3; ++stage) {
      const ShardedRun run = train_sharded(ranks, stage, {.shard_group = group});
      for (int r = 0; r < ranks; ++r) {
        EXPECT_LE(relative_difference(run.weights[r], want), 1e-6)
            << "stage " << stage << ", " << ranks << " ranks in groups of " << group << ", rank " << r;
        EXPECT_EQ(run.weights[r], run.weights[0]) << ranks << " ranks in groups of " << group << ": rank " << r;
      }
    }
  const std::string refused = labkit::test::error_of(4, [](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, 3, {.shard_group = 3});
  });
  EXPECT_NE(refused.find("rank 0: FullyShardedGpt: --hsdp 3: does not divide --ranks 4 into equal groups"), std::string::npos) << refused;
}

// Stage 3 keeping each block whole from its forward to its backward trains the same.
TEST(FullyShardedGpt, KeepingBlocksWholeUntilBackwardTrainsTheSame) {
  const std::vector<float> want = one_rank_weights();
  for (int ranks : {2, 3, 4}) {
    const ShardedRun run = train_sharded(ranks, 3, {.reshard_after_forward = false});
    EXPECT_LE(relative_difference(run.weights[0], want), 1e-6) << ranks << " ranks";
  }
  // Below stage 3 nothing is gathered, so there is nothing to keep whole: refused, not ignored.
  for (int stage : {0, 1, 2}) {
    const std::string refused = labkit::test::error_of(2, [&](Comm& c) {
      Gpt model(kConfig, 5);
      FullyShardedGpt zero(c, model, stage, {.reshard_after_forward = false});
    });
    EXPECT_NE(refused.find("--reshard-after-forward off: does nothing here: only stage 3"), std::string::npos)
        << refused;
  }
}

// Stage 3 prefetching the next block, in either pass or both, trains to the
// same weights bit for bit, since only the time of each gather changes; the
// next block's all-gather is on the stream before the current block computes,
// and the tracker holds one block prefetched.
TEST(FullyShardedGpt, PrefetchingTrainsTheSameWithTheNextBlockInFlight) {
  const std::vector<float> want = one_rank_weights();
  for (int ranks : {2, 3, 4}) {
    const ShardedRun plain = train_sharded(ranks, 3);
    for (Prefetch prefetch : {Prefetch::forward, Prefetch::backward, Prefetch::both})
      for (bool reshard : {true, false}) {
        if (!reshard && prefetch != Prefetch::forward) continue;  // refused: backward gathers nothing then
        const ShardedRun run = train_sharded(ranks, 3, {.reshard_after_forward = reshard, .prefetch = prefetch});
        EXPECT_EQ(run.weights[0], plain.weights[0]) << ranks << " ranks, prefetch " << int(prefetch);
        EXPECT_LE(relative_difference(run.weights[0], want), 1e-6) << ranks << " ranks";
      }
  }
  std::int64_t block = 0, prefetched = 0;
  const auto run = simulate(4, [&](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, 3, {.prefetch = Prefetch::both});
    const int rows = kBatch / 4;
    zero.forward_backward(rows_of(tokens(0, 0), c.rank() * rows, rows), rows_of(tokens(0, 1), c.rank() * rows, rows),
                          rows, kConfig.max_seq);
    if (c.rank() != 0) return;
    block = std::int64_t(zero.units()[1].range.count * sizeof(float));
    prefetched = c.memory().peak[std::size_t(MemoryUse::prefetched)];
    EXPECT_EQ(c.memory().current[std::size_t(MemoryUse::prefetched)], 0);
  });
  EXPECT_EQ(prefetched, block);
  const std::vector<TraceEvent>& events = run.trace->tracks()[0].events;
  const auto computing = std::find_if(events.begin(), events.end(), [](const TraceEvent& e) {
    return e.kind == TraceEvent::Kind::compute && e.name == "forward block 0";
  });
  ASSERT_NE(computing, events.end());
  // The embeddings, the final norm, block 0 and block 1 gathered: block 1's is in flight as block 0 computes.
  int gathers_before = 0;
  bool in_flight = false;
  for (const TraceEvent& e : events)
    if (e.kind == TraceEvent::Kind::collective && e.name == "all_gather" && e.start <= computing->start) {
      ++gathers_before;
      in_flight = in_flight || (e.on_stream && e.end > computing->start);
    }
  EXPECT_EQ(gathers_before, 4);
  EXPECT_TRUE(in_flight);
}

// ZeRO++'s hpZ: backward gathers each block from secondary shards within
// groups of G ranks, the same values as the primary shards hold, so the weights
// are the same bit for bit; each rank holds 1/G of every block from forward to
// backward on top of its shard; and no backward gather leaves its group.
TEST(FullyShardedGpt, HierarchicalPartitioningTrainsTheSameAndGathersWithinItsGroup) {
  const ShardedRun plain = train_sharded(8, 3);
  for (int group : {1, 2, 4})
    for (Prefetch prefetch : {Prefetch::none, Prefetch::both}) {
      const ShardedRun run = train_sharded(8, 3, {.prefetch = prefetch, .hpz_group = group});
      EXPECT_EQ(run.weights[0], plain.weights[0]) << "hpz_group " << group;
    }
  std::size_t block = 0;
  const auto run = simulate(8, [&](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, 3, {.hpz_group = 4});
    const int rows = kBatch / 8;
    zero.forward_backward(rows_of(tokens(0, 0), c.rank() * rows, rows), rows_of(tokens(0, 1), c.rank() * rows, rows),
                          rows, kConfig.max_seq);
    if (c.rank() != 0) return;
    block = zero.units()[1].range.count;
    std::size_t secondary = 0;
    for (const FullyShardedGpt::Unit& u : zero.units()) secondary += u.secondary.shard;
    EXPECT_EQ(secondary, 2 * ((zero.units()[1].range.count + 3) / 4));  // two blocks, a quarter each
    const std::int64_t shard = std::int64_t(zero.shard_parameters().size() * sizeof(float));
    EXPECT_EQ(c.memory().peak[std::size_t(MemoryUse::weights)], shard + std::int64_t(secondary * sizeof(float)));
    EXPECT_EQ(c.memory().current[std::size_t(MemoryUse::weights)], shard);
  });
  // Rank 0's all-gathers: the root's and each block's in forward over all 8
  // ranks, the blocks' again in backward over its group of 4 (send_count).
  std::vector<std::string> groups;
  for (const TraceEvent& e : run.trace->tracks()[0].events)
    if (e.kind == TraceEvent::Kind::collective && e.name == "all_gather")
      for (const auto& [key, value] : e.args)
        if (key == "send_count") groups.push_back(value);
  ASSERT_EQ(groups.size(), 6u);  // embeddings, final norm, block 0, block 1; block 1, block 0 again
  for (int i : {2, 3}) EXPECT_EQ(std::stoul(groups[i]), (block + 7) / 8) << "forward: a shard over all 8";
  for (int i : {4, 5}) EXPECT_EQ(std::stoul(groups[i]), (block + 3) / 4) << "backward: a secondary shard over 4";
  const std::string refused = labkit::test::error_of(4, [&](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, 2, {.hpz_group = 2});
  });
  EXPECT_NE(refused.find("--hpz 2: a stage-3 technique"), std::string::npos) << refused;
}

// ZeRO++'s wire formats: int8 (qwZ) and int4 (qgZ) blocks with a scale each
// round-trip every value within half a step of its block's scale, an odd count
// packs its last int4 value alone, and a block of zeros stays zeros.
TEST(Quantize, BlocksRoundTripWithinHalfAStep) {
  std::vector<float> x(3 * kQuantBlock + 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = i < kQuantBlock ? 0.0f : std::sin(float(i)) * float(i % 7 + 1);
  for (const int bits : {8, 4}) {
    std::vector<std::uint8_t> wire(quantized_bytes(x.size(), bits));
    EXPECT_EQ(wire.size(), 4 * sizeof(float) + (x.size() * bits + 7) / 8);  // four blocks' scales, then the values
    quantize(x, wire, bits);
    std::vector<float> back(x.size());
    dequantize(wire, back, bits);
    const float levels = bits == 8 ? 127 : 7;
    for (std::size_t b = 0; b * kQuantBlock < x.size(); ++b) {
      const std::size_t begin = b * kQuantBlock, end = std::min(x.size(), begin + kQuantBlock);
      float largest = 0;
      for (std::size_t i = begin; i < end; ++i) largest = std::max(largest, std::abs(x[i]));
      for (std::size_t i = begin; i < end; ++i)
        EXPECT_LE(std::abs(back[i] - x[i]), largest / levels / 2 * 1.0001f) << bits << " bits, value " << i;
    }
    for (std::size_t i = 0; i < kQuantBlock; ++i) EXPECT_EQ(back[i], 0.0f);
  }
}

// Stage 3 with qwZ trains on int8-gathered weights: every rank still agrees
// bit for bit, and the weights stay near exact stage 3's but not on them.
TEST(FullyShardedGpt, QuantizedWeightGathersTrainNearExact) {
  const ShardedRun exact = train_sharded(4, 3), quantized = train_sharded(4, 3, {.quantize_weights = true});
  for (const std::vector<float>& w : quantized.weights) EXPECT_EQ(w, quantized.weights[0]);
  const double apart = relative_difference(quantized.weights[0], exact.weights[0]);
  EXPECT_GT(apart, 0);
  EXPECT_LT(apart, 1e-2);
}

// qgZ on 2 nodes of 4 ranks ("pcie"): each rank gets its shard of the mean.
// Values an int4 block holds exactly (integers up to 7 with a 7 in every
// block, the same on every rank) come back exactly, so every shard went to
// its owner; values that differ on every rank come back within the two hops'
// rounding; and what leaves the nodes is hop 2's int4 blocks alone, against
// the ring reduce-scatter's fp32 where the ring leaves each node.
TEST(QuantizedReduceScatter, EachRankGetsItsShardOfTheMeanInFourBits) {
  constexpr int kRanks = 8, kPerNode = 4;
  constexpr std::size_t kShard = 3 * kQuantBlock;
  const auto value = [](std::size_t i, int rank) {
    return rank < 0 ? float(i % kQuantBlock == 5 ? 7 : int(i % 15) - 7) : std::sin(float(i) * 0.37f + float(rank));
  };
  for (const bool exact : {true, false}) {
    const SimRun run = simulate(kRanks, [&](Comm& c) {
      Mesh mesh(c, {{"across", kRanks / kPerNode}, {"node", kPerNode}});
      std::vector<float> full(kRanks * kShard), shard(kShard);
      for (std::size_t i = 0; i < full.size(); ++i) full[i] = value(i, exact ? -1 : c.rank());
      quantized_reduce_scatter(mesh.group("node"), mesh.group("across"), view_of(full), view_of(shard));
      float largest_error = 0;
      for (std::size_t i = 0; i < kShard; ++i) {
        double mean = 0;
        for (int r = 0; r < kRanks; ++r) mean += value(c.rank() * kShard + i, exact ? -1 : r) / kRanks;
        largest_error = std::max(largest_error, float(std::abs(shard[i] - mean)));
      }
      if (exact) {
        EXPECT_EQ(largest_error, 0.0f) << "rank " << c.rank();
      } else {
        EXPECT_GT(largest_error, 0.0f) << "rank " << c.rank();  // four bits do not carry sines exactly
        EXPECT_LT(largest_error, 0.15f) << "rank " << c.rank();  // a step is 1/7 of a block's largest |value|
      }
      c.reduce_scatter(view_of(full), view_of(shard), ReduceOp::avg);  // the ring, for the bytes below
    }, "pcie");
    std::uint64_t quantized = 0, ring = 0;
    for (const TraceTrack& track : run.trace->tracks())
      for (const TraceEvent& e : track.events)
        for (const auto& [key, bytes] : e.args)
          if (key == "off_node_bytes") (e.name == "reduce_scatter" ? ring : quantized) += std::stoull(bytes);
    EXPECT_EQ(quantized, kRanks * quantized_bytes(kShard, 4));  // each rank sends its peer on the other node
    EXPECT_EQ(ring, 2 * (kRanks - 1) * kShard * sizeof(float));  // ranks 3 and 7, where the ring leaves a node
  }
}

// Stage 3 with qgZ on 2 nodes of 4 trains on int4-reduced gradients: every
// rank still agrees bit for bit, near exact stage 3's weights but not on them.
TEST(FullyShardedGpt, QuantizedGradientReducesTrainNearExact) {
  const ShardedRun exact = train_sharded(8, 3, {}, "pcie"),
                   quantized = train_sharded(8, 3, {.quantize_gradients = true}, "pcie");
  for (const std::vector<float>& w : quantized.weights) EXPECT_EQ(w, quantized.weights[0]);
  const double apart = relative_difference(quantized.weights[0], exact.weights[0]);
  EXPECT_GT(apart, 0);
  EXPECT_LT(apart, 1e-2);
}

TEST(FullyShardedGpt, QuantizedGradientsNeedEvenlyFilledNodes) {
  const std::string refused = labkit::test::error_of(6, [](Comm& c) {
    Gpt model(kConfig, 5);
    FullyShardedGpt zero(c, model, 3, {.quantize_gradients = true});
  });
  EXPECT_EQ(refused, "no error");  // 6 ranks on one node of 8: one node, evenly filled
  std::string uneven;
  try {
    simulate(6, [](Comm& c) {
      Gpt model(kConfig, 5);
      FullyShardedGpt zero(c, model, 3, {.quantize_gradients = true});
    }, "pcie");
  } catch (const Error& e) {
    uneven = e.what();
  }
  EXPECT_NE(uneven.find("do not fill their nodes evenly, 4 to a node"), std::string::npos) << uneven;
}

// Each rule for combining stages with ShardingOptions, checked before any rank
// starts, refused naming the fsdp lab's option and its value; the first rule
// broken is the one told.
TEST(FullyShardedGpt, TheShardingRulesNameTheOptions) {
  const auto refused = [](std::vector<int> stages, ShardingOptions o, ShardingPlacement at = {}) {
    try {
      check_sharding(stages, o, at);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const ShardingPlacement eight{.ranks = 8, .per_node = 8, .topology = "dgx-h100"};
  EXPECT_EQ(refused({1, 2, 3}, {.shard_group = 3}, eight),
            "--hsdp 3: does not divide --ranks 8 into equal groups (1, 2, 4, 8 do)");
  EXPECT_EQ(refused({0, 1}, {.shard_group = 4}, eight),
            "--hsdp 4 with --stage 0: nothing is sharded at stage 0 (DDP); HSDP shards stages 1-3");
  EXPECT_EQ(refused({2}, {.quantize_weights = true}),
            "--qwz: a stage-3 technique (int8 weight gathers); drop --stage or give --stage 3");
  EXPECT_EQ(refused({2, 3}, {.quantize_gradients = true}),
            "--qgz: a stage-3 technique (int4 gradient reduces); drop --stage or give --stage 3");
  EXPECT_EQ(refused({3}, {.shard_group = 2, .quantize_gradients = true}),
            "--qgz with --hsdp 2: qgZ reduces over all the ranks, node by node");
  EXPECT_EQ(refused({3}, {.quantize_gradients = true}, {.ranks = 12, .per_node = 8, .topology = "dgx-h100"}),
            "--qgz on --ranks 12: dgx-h100 puts 8 ranks on a node, so the last node holds 4; qgZ's all-to-all hops "
            "need every node full (--ranks a multiple of 8)");
  EXPECT_EQ(refused({3}, {.hpz_group = 3}, eight), "--hpz 3: does not divide --ranks 8 into equal groups");
  EXPECT_EQ(refused({3}, {.shard_group = 4, .hpz_group = 2}, eight),
            "--hpz 2 with --hsdp 4: HSDP already gathers within its groups");
  EXPECT_EQ(refused({3}, {.reshard_after_forward = false, .hpz_group = 2}),
            "--hpz 2 with --reshard-after-forward off: nothing is gathered again for backward");
  EXPECT_EQ(refused({2}, {.hpz_group = 4}), "--hpz 4: a stage-3 technique; drop --stage or give --stage 3");
  EXPECT_EQ(refused({3}, {.hpz_group = 8}, eight),
            "--hpz 8 on --ranks 8: a secondary shard over every rank is the primary shard again; hpZ's groups are "
            "smaller (a node's)");
  EXPECT_EQ(refused({3}, {.shard_group = 1}, eight),
            "--hsdp 1: a group of one rank shards nothing, and every rank holds everything: that is DDP (--stage 0)");
  EXPECT_EQ(refused({3}, {.reshard_after_forward = false, .prefetch = Prefetch::backward}),
            "--prefetch backward with --reshard-after-forward off: backward gathers nothing to prefetch (the "
            "parameters stay whole from forward)");
  EXPECT_EQ(refused({0, 1, 2}, {.prefetch = Prefetch::backward}),
            "--prefetch backward: does nothing here: only stage 3 gathers parameters before they compute");
  EXPECT_EQ(refused({1}, {.reshard_after_forward = false}).rfind("--reshard-after-forward off: does nothing here", 0),
            0u);
  EXPECT_EQ(refused({4}, {}), "--stage 4: ZeRO's stages are 0, 1, 2 and 3");
  // Where the ranks are not known yet (mpirun), only the rules that need none of them.
  EXPECT_EQ(refused({3}, {.shard_group = 3, .quantize_gradients = false}), "(accepted)");
  EXPECT_EQ(refused({0, 1, 2, 3}, {.prefetch = Prefetch::both}, eight), "(accepted)");
  EXPECT_EQ(refused({3}, {.prefetch = Prefetch::both, .hpz_group = 4, .quantize_weights = true,
                          .quantize_gradients = true}, eight), "(accepted)");
}

TEST(FullyShardedGpt, TheMemoryEstimatorCountsTheTinyGptsParameters) {
  EXPECT_EQ(memory::count_parameters(architecture_of(kConfig)).total, double(Gpt(kConfig, 1).parameter_count()));
}

TEST(FullyShardedGpt, StageThreeKeepsOnlyItsShard) {
  simulate(4, [&](Comm& c) {
    Gpt model(kConfig, 5);
    const std::size_t n = model.parameter_count();
    FullyShardedGpt zero(c, model, 3);
    const float* w = model.parameters().data();
    EXPECT_TRUE(std::all_of(w, w + n, [](float x) { return std::isnan(x); })) << "freed parameters are NaN";
    std::size_t padded = 0;
    for (const FullyShardedGpt::Unit& u : zero.units()) padded += u.layout.padded();
    EXPECT_EQ(zero.shard_parameters().size(), padded / 4);
    EXPECT_GE(padded, n);
  });
}

// What each stage tells the memory tracker it holds, at its peak: whole
// weights below stage 3, whole gradients below stage 2, else shards; at stages
// 2 and 3 the embeddings', the final norm's and one block's whole gradients
// during backward; at stage 3 those and one block gathered. The memory lab
// estimates each of them.
TEST(FullyShardedGpt, TellsTheTrackerWhatItHolds) {
  const int ranks = 4;
  for (int stage = 0; stage <= 3; ++stage)
    simulate(ranks, [&](Comm& c) {
      Gpt model(kConfig, 5);
      FullyShardedGpt zero(c, model, stage);
      const int rows = kBatch / ranks;
      zero.forward_backward(rows_of(tokens(0, 0), c.rank() * rows, rows), rows_of(tokens(0, 1), c.rank() * rows, rows),
                            rows, kConfig.max_seq);
      if (c.rank() != 0) return;
      const std::int64_t f = sizeof(float), whole = std::int64_t(model.parameter_count()) * f;
      const std::int64_t shard = std::int64_t(zero.shard_parameters().size()) * f;
      const std::int64_t kept = std::int64_t(zero.units().front().layout.count + zero.units().back().layout.count) * f;
      const std::int64_t block = std::int64_t(zero.units()[1].layout.count) * f;
      const MemoryTracker& m = c.memory();
      auto peak = [&](MemoryUse u) { return m.peak[std::size_t(u)]; };
      EXPECT_EQ(peak(MemoryUse::weights), stage < 3 ? whole : shard) << "stage " << stage;
      EXPECT_EQ(peak(MemoryUse::gradients), stage < 2 ? whole : shard + kept + block) << "stage " << stage;
      EXPECT_EQ(m.current[std::size_t(MemoryUse::gradients)], stage < 2 ? whole : shard) << "stage " << stage;
      EXPECT_EQ(peak(MemoryUse::gathered), stage == 3 ? kept + block : 0) << "stage " << stage;
      EXPECT_EQ(m.current[std::size_t(MemoryUse::gathered)], 0) << "stage " << stage;
      EXPECT_EQ(peak(MemoryUse::activations), std::int64_t(model.activation_bytes())) << "stage " << stage;
      // The memory lab's estimate of each, for the same configuration, within 5%.
      memory::Plan plan;
      plan.precision = memory::Precision::fp32;
      plan.state = {memory::Precision::fp32, memory::Precision::fp32, memory::Precision::fp32, false};
      plan.optimizer = "sgd";
      plan.zero = stage;
      plan.dp = ranks;
      plan.micro_batch = rows;
      plan.seq = kConfig.max_seq;
      plan.activation_layout = memory::ActivationLayout::llmc;
      const memory::Breakdown estimate = memory::estimate(architecture_of(kConfig), plan, memory::gpu_preset("h100-80g"));
      for (const auto& [use, line] : {std::pair{MemoryUse::weights, "weights"}, {MemoryUse::gradients, "gradients"},
                                      {MemoryUse::activations, "activations"}, {MemoryUse::gathered, "gathered weights"}}) {
        double want = 0;
        for (const memory::Line& l : estimate.lines) want += l.component == line ? l.bytes : 0;
        EXPECT_NEAR(double(peak(use)), want, 0.05 * want) << "stage " << stage << ": " << line;
      }
    });
}

// Bytes of every collective in rank 0's trace, per step: N fp32 parameters,
// padded per unit to a multiple of P; an allreduce or reduce-scatter of them is
// 2N's first half and the all-gather its second (see fully_sharded.h). Stage 3
// gathers each block twice, and the embeddings and final norm once: they stay
// gathered from their forward through their backward, as FSDP keeps its root.
TEST(FullyShardedGpt, SendsTwoNThenThreeNParametersWorth) {
  const int ranks = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    std::uint64_t padded_bytes = 0, kept_bytes = 0, full_bytes = 0;
    const auto run = simulate(ranks, [&](Comm& c) {
      Gpt model(kConfig, 5);
      FullyShardedGpt zero(c, model, stage);
      if (c.rank() == 0) {
        full_bytes = model.parameter_count() * sizeof(float);
        for (const FullyShardedGpt::Unit& u : zero.units()) padded_bytes += u.layout.padded() * sizeof(float);
        kept_bytes = (zero.units().front().layout.padded() + zero.units().back().layout.padded()) * sizeof(float);
      }
      const int rows = kBatch / ranks;
      zero.forward_backward(rows_of(tokens(0, 0), c.rank() * rows, rows), rows_of(tokens(0, 1), c.rank() * rows, rows),
                            rows, kConfig.max_seq);
      zero.step([](View, View) {});
    });
    std::uint64_t bytes = 0, gathers = 0;
    for (const TraceEvent& e : run.trace->tracks()[0].events)
      if (e.kind == TraceEvent::Kind::collective) {
        bytes += e.bytes;
        gathers += e.name == "all_gather";
      }
    // An allreduce counts once (its 2N on the wire is a reduce-scatter and an all-gather).
    const std::uint64_t want = stage == 0 ? full_bytes : stage == 3 ? 3 * padded_bytes - kept_bytes : 2 * padded_bytes;
    EXPECT_EQ(bytes, want) << "stage " << stage;
    // Stage 1 gathers the whole model as one run; 2 each unit once; 3 each block twice.
    EXPECT_EQ(gathers, stage == 0 ? 0u : stage == 1 ? 1u : stage == 3 ? 2 * kConfig.layers + 2u : kConfig.layers + 2u)
        << "stage " << stage;
  }
}

// Payload-free stage 3 of GPT-2 XL's shapes on 16 ranks of two nodes: a layer's
// all-gather in front of its compute is exposed; prefetched, it runs under the
// layer before, in the pass that prefetches, and in both with both.
TEST(ShardedMetaStep, PrefetchHidesTheGathersOfThePassThatPrefetches) {
  const memory::Architecture arch = memory::model_preset("gpt2-xl");
  auto step = [&](Prefetch prefetch) {
    const auto rank_fn = [&](Comm& c) { sharded_meta_step(c, arch, 1.0, 3, {.prefetch = prefetch}); };
    return simulate(16, rank_fn, "dgx-h100", false).elapsed;
  };
  const double none = step(Prefetch::none), forward = step(Prefetch::forward), backward = step(Prefetch::backward),
               both = step(Prefetch::both);
  EXPECT_GT(none, 1.0);
  EXPECT_LT(forward, none);
  EXPECT_LT(backward, none);
  EXPECT_LT(both, std::min(forward, backward));
  EXPECT_GE(both, 1.0);  // never below the compute
}
