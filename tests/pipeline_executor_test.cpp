// The pipeline executor on the tiny GPT: every schedule, on P simulated
// stages, computes the one-rank model's loss and gradients and trains to its
// weights; a stage keeps no more micro-batches than its schedule says; bad
// pipelines are refused naming the rank.
#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/pipeline_executor.h"

using namespace labkit;
using labkit::test::simulate;

namespace {

constexpr int kT = 16, kVocab = 15;

GptConfig model_of(int layers) {
  GptConfig config = gpt_preset("tiny-gpt", kVocab);
  config.layers = layers;
  config.max_seq = kT;
  return config;
}

std::vector<int> tokens(int B, int seed) {
  std::vector<int> out(std::size_t(B) * kT);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = int((i * 7 + std::size_t(seed) * 13 + i * i) % kVocab);
  return out;
}

// `steps` steps of SGD with momentum: one rank on the whole batch, then the
// schedule on its stages; the largest difference of a stage's weights (and,
// after the first step, of its loss) from one rank's.
struct Difference {
  double loss = 0, weights = 0;
  std::size_t owned = 0;  // parameters the stages own, summed: the whole model, and the shared embeddings twice
};
Difference train(const Schedule& schedule, int layers, int B, int steps) {
  const GptConfig config = model_of(layers);
  Gpt one(config, 3);
  SgdMomentum one_sgd{.lr = 0.05f};
  float first_loss = 0;
  for (int s = 0; s < steps; ++s) {
    const float loss = one.forward(tokens(B, s), tokens(B, s + 1), B, kT);
    if (s == 0) first_loss = loss;
    one.zero_grad();
    one.backward();
    one_sgd.update({one.parameters().data(), one.parameter_count()}, {one.gradients().data(), one.parameter_count()});
  }
  const std::vector<float> want = one.parameters().to_host();
  Difference out;
  simulate(schedule.stages, [&](Comm& c) {
    Gpt model(config, 3);
    PipelineExecutor pipeline(c, model, schedule);
    std::vector<SgdMomentum> sgd(pipeline.owned().size(), SgdMomentum{.lr = 0.05f});
    for (int s = 0; s < steps; ++s) {
      const PipelineStep step = pipeline.step(tokens(B, s), tokens(B, s + 1), B, kT);
      if (s == 0 && step.loss != 0) out.loss = std::abs(double(step.loss) - first_loss) / first_loss;
      for (std::size_t i = 0; i < pipeline.owned().size(); ++i) {
        const ParameterRange r = pipeline.owned()[i];
        sgd[i].update({model.parameters().data() + r.offset, r.count}, {model.gradients().data() + r.offset, r.count});
      }
    }
    out.weights = std::max(out.weights, relative_difference(model.parameters().to_host(), want, pipeline.owned()));
    for (const ParameterRange& r : pipeline.owned()) out.owned += r.count;
  });
  return out;
}

}  // namespace

TEST(PipelineExecutor, EveryScheduleTrainsToOneRanksWeights) {
  const int layers = 4, B = 8, steps = 3;
  const std::size_t whole = Gpt(model_of(layers), 3).parameter_count();
  const std::size_t embeddings = std::size_t(kVocab) * 64;
  for (const int P : {1, 2, 4})
    for (const char* name : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zbv"}) {
      const int V = std::string(name) == "interleaved" || std::string(name) == "zbv" ? 2 : 1;
      if (P * V > layers) continue;
      const Schedule schedule = make_schedule(name, P, 4, V);
      const Difference d = train(schedule, layers, B, steps);
      const std::string what = std::string(name) + ", P = " + std::to_string(P);
      EXPECT_LT(d.loss, 1e-6) << what;
      EXPECT_LT(d.weights, 1e-6) << what;
      // The stages own the model once, the token embeddings twice where the first and last chunk are apart.
      EXPECT_EQ(d.owned, whole + (schedule.stage_of_chunk.front() != schedule.stage_of_chunk.back() ? embeddings : 0))
          << what;
    }
}

TEST(PipelineExecutor, AStageKeepsWhatItsScheduleSays) {
  const GptConfig config = model_of(4);
  for (const char* name : {"gpipe", "1f1b"}) {
    const Schedule schedule = make_schedule(name, 4, 8);
    const ScheduleRun bound = validate(schedule);
    simulate(4, [&](Comm& c) {
      Gpt model(config, 3);
      PipelineExecutor pipeline(c, model, schedule);
      const PipelineStep step = pipeline.step(tokens(8, 0), tokens(8, 1), 8, kT);
      EXPECT_EQ(step.activation_sets, bound.peak_in_flight[std::size_t(c.rank())]) << name << ", stage " << c.rank();
      // The tracker's peak: that many micro-batches of the stage's chunk.
      EXPECT_EQ(c.memory().peak[std::size_t(MemoryUse::activations)],
                std::int64_t(step.activation_sets) * std::int64_t(pipeline.chunk_activation_bytes(c.rank(), 1, kT)))
          << name << ", stage " << c.rank();
      // Each stage's forwards and backwards, every micro-batch once each.
      EXPECT_EQ(step.slots.size(), 2u * 8) << name << ", stage " << c.rank();
    });
  }
}

TEST(PipelineExecutor, BadPipelinesAreRefusedNamingTheRank) {
  const std::string layers = labkit::test::error_of(4, [](Comm& c) {
    Gpt model(model_of(2), 3);
    PipelineExecutor pipeline(c, model, one_f_one_b_schedule(4, 4));
  });
  EXPECT_NE(layers.find("rank 0: pipeline: 2 layers do not cut into 4 equal chunks"), std::string::npos) << layers;
  const std::string stages = labkit::test::error_of(2, [](Comm& c) {
    Gpt model(model_of(4), 3);
    PipelineExecutor pipeline(c, model, one_f_one_b_schedule(4, 4));
  });
  EXPECT_NE(stages.find("the 1f1b schedule has 4 stages and the pipeline group 2 ranks"), std::string::npos) << stages;
  const std::string batch = labkit::test::error_of(2, [](Comm& c) {
    Gpt model(model_of(2), 3);
    PipelineExecutor pipeline(c, model, gpipe_schedule(2, 4));
    pipeline.step(tokens(6, 0), tokens(6, 1), 6, kT);
  });
  EXPECT_NE(batch.find("a batch of 6 sequences does not cut into 4 equal micro-batches"), std::string::npos) << batch;
}
