// Megatron's tensor parallelism on the tiny GPT: every rank's loss and every
// gradient it keeps equal the dense model's (sliced as the rank keeps it), and
// so does a run of training steps.
#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/memory_tracker.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/tensor_parallel_gpt.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

constexpr int kB = 2, kT = 16;

std::vector<int> tokens(int vocab, int seed) {
  std::vector<int> out(kB * kT);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = int((i * 7 + std::size_t(seed) * 13 + i * i) % std::size_t(vocab));
  return out;
}

// One forward and backward, dense and on `t` tensor-parallel ranks: the
// largest relative difference of the loss and of each rank's gradients.
struct Difference {
  double loss = 0, gradients = 0;
};
Difference one_step(int t, int vocab, bool sp, int heads = 4) {
  GptConfig config = gpt_preset("tiny-gpt", vocab);
  config.heads = heads;
  Gpt dense(config, 3);
  const std::vector<int> x = tokens(vocab, 1), y = tokens(vocab, 2);
  const float dense_loss = dense.forward(x, y, kB, kT);
  dense.zero_grad();
  dense.backward();
  const std::vector<float> dense_grads = dense.gradients().to_host();
  Difference out;
  simulate(t, [&](Comm& c) {
    TensorParallelGpt model(c, Gpt(config, 3), sp);
    const float loss = model.forward(x, y, kB, kT);
    model.zero_grad();
    model.backward();
    const std::vector<float> want = model.slice_of_dense(dense_grads), got = model.gradients().to_host();
    out.loss = std::max(out.loss, std::abs(double(loss) - dense_loss) / std::abs(double(dense_loss)));
    out.gradients = std::max(out.gradients, relative_difference(got, want));
  });
  return out;
}

}  // namespace

TEST(TensorParallelGpt, LossAndEveryGradientEqualTheDenseModel) {
  for (const bool sp : {false, true})
    for (const int t : {1, 2, 4})
      for (const int vocab : {16, 15}) {  // 15: the last rank's slice padded with a zero row (t = 2, 4)
        const Difference d = one_step(t, vocab, sp);
        EXPECT_LT(d.loss, 1e-5) << "t = " << t << ", vocab " << vocab << (sp ? ", sequence parallel" : "");
        EXPECT_LT(d.gradients, 1e-5) << "t = " << t << ", vocab " << vocab << (sp ? ", sequence parallel" : "");
      }
}

// t = 8 where the heads allow it: the tiny GPT with 8 heads of 8 channels.
TEST(TensorParallelGpt, EightRanksEqualTheDenseModelWithEightHeads) {
  for (const bool sp : {false, true}) {
    const Difference d = one_step(8, 15, sp, 8);
    EXPECT_LT(d.loss, 1e-5) << (sp ? "sequence parallel" : "");
    EXPECT_LT(d.gradients, 1e-5) << (sp ? "sequence parallel" : "");
  }
}

TEST(TensorParallelGpt, TrainsToTheDenseWeights) {
  const GptConfig config = gpt_preset("tiny-gpt", 15);
  constexpr int kSteps = 5;
  Gpt dense(config, 3);
  SgdMomentum dense_sgd{.lr = 0.05f};
  for (int s = 0; s < kSteps; ++s) {
    dense.forward(tokens(15, s), tokens(15, s + 1), kB, kT);
    dense.zero_grad();
    dense.backward();
    dense_sgd.update({dense.parameters().data(), dense.parameter_count()},
                     {dense.gradients().data(), dense.parameter_count()});
  }
  const std::vector<float> dense_weights = dense.parameters().to_host();
  simulate(4, [&](Comm& c) {
    TensorParallelGpt model(c, Gpt(config, 3));
    SgdMomentum sgd{.lr = 0.05f};
    for (int s = 0; s < kSteps; ++s) {
      model.forward(tokens(15, s), tokens(15, s + 1), kB, kT);
      model.zero_grad();
      model.backward();
      sgd.update({model.parameters().data(), model.parameter_count()},
                 {model.gradients().data(), model.parameter_count()});
    }
    EXPECT_LT(relative_difference(model.parameters().to_host(), model.slice_of_dense(dense_weights)), 1e-5)
        << "rank " << c.rank();
  });
}

TEST(TensorParallelGpt, HeadsThatDoNotSplitAreRefused) {
  const std::string refused = labkit::test::error_of(3, [](Comm& c) {
    TensorParallelGpt model(c, Gpt(gpt_preset("tiny-gpt", 16), 3));
  });
  EXPECT_NE(refused.find("rank 0: TensorParallelGpt: the tiny GPT's 4 heads do not split over 3 tensor-parallel "
                         "ranks (each rank takes whole heads)"), std::string::npos) << refused;
}

// The rules the tp lab names its --ranks or --tp before, checked before any
// rank starts: whole heads, whole key-value groups, the MLP's columns, and
// sequence parallelism's equal shards.
TEST(TensorParallelGpt, TheSplitRulesSayWhatDoesNotDivide) {
  const memory::Architecture tiny = architecture_of(gpt_preset("tiny-gpt", 16));
  EXPECT_EQ(tensor_parallel_refusal(tiny, 3),
            "the tiny GPT's 4 heads do not split over 3 tensor-parallel ranks (each rank takes whole heads)");
  EXPECT_EQ(tensor_parallel_refusal(tiny, 4), "");
  EXPECT_EQ(tensor_parallel_refusal(memory::model_preset("llama2-70b"), 16),
            "llama2-70b's 8 kv heads do not split over 16 tensor-parallel ranks (each rank takes whole key-value "
            "groups)");
  memory::Architecture narrow = tiny;  // heads that split, an MLP that does not
  narrow.ffn = 130;
  EXPECT_EQ(tensor_parallel_refusal(narrow, 4), "the tiny GPT's 130 MLP features do not split over 4 "
                                                "tensor-parallel ranks (the column-parallel layer's width)");
  EXPECT_EQ(sequence_parallel_refusal(32, 3), "the sequence of 32 does not split into 3 equal shards");
  EXPECT_EQ(sequence_parallel_refusal(32, 4), "");
}

// Megatron's 4 b s h per layer: two allreduces forward, two backward, each of
// the B x T x C activations, beside the embedding's, the head's max and sums,
// and the head's input gradient.
TEST(TensorParallelGpt, EachLayerAllreducesFourActivations) {
  const GptConfig config = gpt_preset("tiny-gpt", 16);
  const auto run = simulate(2, [&](Comm& c) {
    TensorParallelGpt model(c, Gpt(config, 3));
    model.forward(tokens(16, 1), tokens(16, 2), kB, kT);
    model.backward();
  });
  std::size_t activations = 0, others = 0;
  const std::uint64_t btc = std::uint64_t(kB) * kT * config.channels * sizeof(float);
  for (const TraceEvent& e : run.trace->tracks()[0].events)
    if (e.kind == TraceEvent::Kind::collective) (e.name == "all_reduce" && e.bytes == btc ? activations : others)++;
  EXPECT_EQ(activations, 4u * config.layers + 2);  // + the embedding's and the head's input gradient
  EXPECT_EQ(others, 2u);                           // the softmax's max, and its sum with the target's logit
}

// Sequence parallelism: each allreduce becomes a reduce-scatter (g forward, f
// backward) and an all-gather (f forward, g backward) of the same B x T x C,
// plus the head's all-gather forward and the embedding's backward; the norms'
// outputs gathered again in backward for the column-parallel layers (two a
// layer), since they are not kept; and the norms' gradients summed once.
TEST(TensorParallelGpt, SequenceParallelSplitsEachAllreduceInTwo) {
  const GptConfig config = gpt_preset("tiny-gpt", 16);
  const std::uint64_t btc = std::uint64_t(kB) * kT * config.channels * sizeof(float);
  std::map<std::string, std::size_t> count;
  const auto run = simulate(4, [&](Comm& c) {
    TensorParallelGpt model(c, Gpt(config, 3), true);
    model.forward(tokens(16, 1), tokens(16, 2), kB, kT);
    model.backward();
  });
  for (const TraceEvent& e : run.trace->tracks()[0].events)
    if (e.kind == TraceEvent::Kind::collective && e.bytes == btc) ++count[e.name];
  EXPECT_EQ(count["all_gather"], 6u * config.layers + 2);      // + the head's input, the embedding's gradient
  EXPECT_EQ(count["reduce_scatter"], 4u * config.layers + 2);  // + the embedding, the head's input gradient
  EXPECT_EQ(count["all_reduce"], 0u);
}

// Each rank's activations, as its tracker was told, equal the memory lab's
// llm.c layout split as this model splits it, to the byte: with and without
// sequence parallelism, with a padded vocabulary.
TEST(TensorParallelGpt, ActivationsEqualTheEstimateToTheByte) {
  const GptConfig config = gpt_preset("tiny-gpt", 15);
  for (const bool sp : {false, true})
    for (const int t : {1, 2, 4})
      simulate(t, [&](Comm& c) {
        TensorParallelGpt model(c, Gpt(config, 3), sp);
        model.forward(tokens(15, 1), tokens(15, 2), kB, kT);
        const double estimate = memory::llmc_activation_bytes(architecture_of(config), kT, kB, t, sp);
        EXPECT_EQ(double(model.activation_bytes()), estimate) << "t = " << t << (sp ? ", sequence parallel" : "");
        EXPECT_EQ(double(c.memory().peak[std::size_t(MemoryUse::activations)]), estimate) << "rank " << c.rank();
      });
}

TEST(TensorParallelGpt, SequenceParallelNeedsTheSequenceToSplit) {
  const std::string refused = labkit::test::error_of(4, [](Comm& c) {
    TensorParallelGpt model(c, Gpt(gpt_preset("tiny-gpt", 16), 3), true);
    model.forward(std::vector<int>(2 * 6, 1), std::vector<int>(2 * 6, 2), 2, 6);
  });
  EXPECT_NE(refused.find("sequence parallelism: the sequence of 6 does not split into 4 equal shards"),
            std::string::npos) << refused;
}
