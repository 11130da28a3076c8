// An MoE scenario, "moe:EP[:none|aux|bias[:STEPS[:TOPOLOGY]]]" ("moe:4:none:40"):
// the moe lab's GPT (8 experts, top-2, capacity factor 1.25) trained on EP
// ranks, each on its share of every batch, with its routers' history for the
// MoE routing panel.
#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/parallel/moe_gpt.h"
#include "labkit/parallel/sequences.h"
#include "labkit/parallel/training_loop.h"
#include "labkit/run.h"
#include "scenarios/scenarios.h"

namespace viz {

namespace {
// The moe lab's defaults.
constexpr int kMoeExperts = 8, kMoeTopK = 2, kMoeBatch = 8;
constexpr double kMoeCapacityFactor = 1.25;
constexpr float kMoeLearningRate = 0.01f;
constexpr std::uint64_t kMoeSeed = 1337;

struct MoeScenario final : Scenario {
  labkit::Balance balance = labkit::Balance::aux;
  int steps = 20;

  // Every step: each layer's routing, its tokens' all-to-alls, the gradients averaged.
  ScenarioRun run() const override {
    ScenarioRun out;
    const labkit::TrainingRun r = train(out.routing);
    out.trace = from_trace(*r.trace, fmt::format("the MoE GPT ({} experts, top-{}, {} balancing) trained {} steps on "
                                                 "{} ep ranks, {}", kMoeExperts, kMoeTopK, labkit::name_of(balance),
                                                 steps, ranks, topology));
    return out;
  }

  // The moe lab's training (labkit::MoeTrainer in labkit::run_training, as
  // moe_lab::train runs it); records each step's routing into `history`.
  labkit::TrainingRun train(RoutingHistory& history) const {
    const labkit::Sequences data = labkit::training_sequences(kMoeSeed, labkit::gpt_preset("tiny-gpt", 1).max_seq);
    const labkit::GptConfig config = labkit::gpt_preset("tiny-gpt", data.tokens.vocab);
    const labkit::MoeConfig moe{.experts = kMoeExperts, .top_k = kMoeTopK, .capacity_factor = kMoeCapacityFactor,
                                .balance = balance};
    labkit::RunOptions o = run_options();
    o.payload_free = false;  // the MoE GPT computes
    history = {kMoeTopK, kMoeCapacityFactor, {}};
    return labkit::run_training(o, [&](labkit::Comm& comm, labkit::RankTraining& training) {
      labkit::MoeTrainer trainer(comm, config, moe, data, kMoeBatch, kMoeSeed, kMoeLearningRate);
      training.steps(steps, [&](int step) {
        const float loss = trainer.step(step);
        if (comm.rank() == 0) {  // the stats are the group's, alike on every rank
          auto& layers = history.steps.emplace_back();
          for (int l = 0; l < config.layers; ++l) layers.push_back(trainer.model().layer(l).stats());
        }
        return loss;
      });
    });
  }
};
}  // namespace

std::unique_ptr<Scenario> parse_moe_scenario(const ScenarioText& t) {
  auto s = std::make_unique<MoeScenario>();
  const bool steps = t.fields.size() < 4 || whole_number(t.fields[3], 1, 1000, s->steps);
  if (t.fields.size() > 5 || kMoeExperts % t.ranks != 0 || !steps)
    throw labkit::Error(fmt::format("'{}' is not moe:EP[:none|aux|bias[:STEPS[:TOPOLOGY]]] (EP dividing the {} "
                                    "experts, 1 to 1000 steps)", t.text, kMoeExperts));
  if (t.fields.size() > 2) s->balance = labkit::parse_balance(t.fields[2]);
  s->topology = t.field_or(4, s->topology);
  return s;
}

}  // namespace viz
